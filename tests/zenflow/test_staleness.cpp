// When ZenFlow's CPU updates reach the working parameters, against a serial reference: AdamW in
// double precision where the selected columns and 1-D parameters take each step's gradient at
// once, and the other columns take one step on the mean gradient of their window, visible a fixed
// number of steps later, as docs/zenflow.md states for each schedule. The update plan runs alone
// on a CPU run (the host stands in for the GPU), fed the gradients of an elementwise quadratic
// loss at the parameters the next forward would read, so a CPU update that lands a step early or
// late changes every later gradient.
#include "config/config.hpp"
#include "plugin/plugin_set.hpp"
#include "update/update_plan.hpp"
#include "update/zenflow.hpp"
#include "plugin/plugin_registry.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

using namespace zf;

namespace {

constexpr uint64_t kRows = 8, kCols = 12, kBias = 8, kNumel = kRows * kCols + kBias;
constexpr double kLr = 0.05, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01;

// Loss sum_i a_i / 2 (p_i - 1)^2 plus a fixed noise per step and element: columns 2, 5 and 9 of
// the weight have the largest gradients at the first step, so topk_ratio 0.25 selects them.
bool heavy_column(uint64_t column) { return column == 2 || column == 5 || column == 9; }
double curvature(uint64_t i) { return i < kRows * kCols && heavy_column(i / kRows) ? 30.0 : 1.0 + 0.1 * double(i % 7); }
double noise(int64_t step, uint64_t i) { return 0.2 * std::sin(double(step) * 1.7 + double(i) * 0.37); }
double gradient(int64_t step, uint64_t i, double p) { return curvature(i) * (p - 1.0) + noise(step, i); }
bool on_device(uint64_t i) { return i >= kRows * kCols || heavy_column(i / kRows); }

struct Schedule {
  bool staggered = true, overlap = true;
  int64_t interval = 1, warm_up = 0;
  std::string correction = "none";  // zenflow.correction, with zenflow.correction_factor = factor
  double factor = 0;
};

// The reference: one fp64 master and moment chain per element, as one AdamW.
struct Reference {
  Schedule s;
  std::vector<double> master = std::vector<double>(kNumel, 0.0), m = master, v = master, visible = master, sum = master;
  std::vector<double> pending = master;  // a CPU update's result not yet visible
  std::vector<int64_t> summed = std::vector<int64_t>(kNumel, 0), updates = summed, visible_at = summed;
  // correction: the weight of each window (age_gate), each element's last CPU result (lookahead).
  std::vector<double> weight = master, last = master;

  // A CPU result becomes visible: lookahead shows it extrapolated from the last one by `factor`
  // of their difference (not at the end of the run: `settled`).
  void show(uint64_t i, bool settled = false) {
    visible[i] = pending[i];
    if (s.correction != "lookahead") return;
    if (!settled) visible[i] = pending[i] + s.factor * (pending[i] - last[i]);
    last[i] = pending[i];
  }

  void adam(uint64_t i, double g, int64_t count) {
    const double decay = i < kRows * kCols ? kDecay : 0.0;
    master[i] *= 1 - kLr * decay;
    m[i] = kBeta1 * m[i] + (1 - kBeta1) * g;
    v[i] = kBeta2 * v[i] + (1 - kBeta2) * g * g;
    const double m_hat = m[i] / (1 - std::pow(kBeta1, double(count))), v_hat = v[i] / (1 - std::pow(kBeta2, double(count)));
    master[i] -= kLr * m_hat / (std::sqrt(v_hat) + kEps);
  }
  // The group of element i under the staggered schedule: the shard cut into `interval` parts.
  int64_t group(uint64_t i) const {
    for (int64_t k = 0;; ++k)
      if (i < kNumel * uint64_t(k + 1) / uint64_t(s.interval)) return k;
  }
  // Is element i's CPU update due after step t (an active step)?
  bool due(uint64_t i, int64_t t) const {
    const int64_t active = t - s.warm_up;  // 1, 2, ...
    if (s.staggered) return (active - 1) % s.interval == group(i);
    return active % s.interval == 0;
  }
  // Element i's CPU update from its window's mean, visible after step `at`.
  void cpu_update(uint64_t i, int64_t at) {
    adam(i, sum[i] / weight[i], s.warm_up + ++updates[i]);
    pending[i] = master[i];
    visible_at[i] = at;
    summed[i] = 0;
    weight[i] = 0;
  }
  // One step from the gradients of the visible parameters.
  void step(int64_t t) {
    std::vector<double> g(kNumel);
    for (uint64_t i = 0; i < kNumel; ++i) g[i] = gradient(t, i, visible[i]);
    if (t == s.warm_up + 1) last = visible;  // the first selection: lookahead starts where the columns are
    for (uint64_t i = 0; i < kNumel; ++i) {
      bool swapped = false;  // after this step's gradient was taken: that gradient is stale
      if (visible_at[i] == t) {  // swapped in at this step
        show(i);
        visible_at[i] = 0;
        swapped = true;
      }
      if (t <= s.warm_up) {  // plain synchronous offload
        adam(i, g[i], t);
        visible[i] = master[i];
      } else if (on_device(i)) {
        adam(i, g[i], t);  // the device's step count is the run's
        visible[i] = master[i];
      } else {
        const double w = s.correction == "age_gate" && swapped ? s.factor : 1.0;
        if (w != 0) {  // age_gate 0 drops the stale gradient: the window starts at the next step
          sum[i] = summed[i] ? sum[i] + w * g[i] : w * g[i];
          ++summed[i];
          weight[i] += w;
        }
        if (!due(i, t) || summed[i] == 0) continue;
        const int64_t delay = !s.overlap ? 0 : s.staggered ? 1 : s.interval;
        cpu_update(i, t + delay);
        if (delay == 0) {
          show(i);
          visible_at[i] = 0;
        }
      }
    }
  }
  // The end of the run: what is pending is swapped in, then every partial window applied.
  void complete(int64_t t) {
    for (uint64_t i = 0; i < kNumel; ++i) {
      if (visible_at[i] > 0) show(i, /*settled=*/true);
      if (!on_device(i) && summed[i] > 0) {
        cpu_update(i, t);
        show(i, /*settled=*/true);
      }
      if (s.correction == "lookahead" && !on_device(i)) visible[i] = last[i];
    }
  }
};

std::string config_text(const Schedule &s) {
  return "[optimizer]\nplugin = \"cpu_adam\"\nthreads = 1\n"
         "[offload]\nplugin = \"cpu_optimizer\"\nbucket_size = 40\n"
         "[selector]\nplugin = \"topk_l1\"\n"
         "[zenflow]\ntopk_ratio = 0.25\nselect_strategy = \"step\"\nselect_interval = 1000\n"
         "schedule = \"" + std::string(s.staggered ? "staggered" : "deepspeed") + "\"\n" +
         "update_interval = " + std::to_string(s.interval) + "\n" +
         "overlap_step = " + (s.overlap ? "true" : "false") + "\n" +
         "full_warm_up_rounds = " + std::to_string(s.warm_up) + "\n" +
         "correction = \"" + s.correction + "\"\ncorrection_factor = \"" + std::to_string(s.factor) + "\"\n";
}

// The update plan over the test's layout (a weight of kCols columns and a bias) under schedule s,
// its master and parameters from zeros.
struct PlanUnderTest {
  RunConfig config;
  std::unique_ptr<Runtime> runtime = Runtime::single_cpu();
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  PluginSet plugins{config, *runtime, registry};
  std::vector<zf_segment> segments = {
      {"w", 0, kRows * kCols, kRows, kCols, 0, ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS},
      {"b", kRows * kCols, kBias, kBias, 1, 0, ZF_SEGMENT_NO_DECAY}};
  zf_block block{"block", 0, kNumel, 0, 2};
  zf_layout layout{sizeof(zf_layout), 2, segments.data(), 1, 0, &block, kNumel, 1};
  UpdatePlan plan{*runtime, plugins, layout, 0, kNumel, torch::kFloat32, ZF_TIER_HOST,
                  OptimizerSettings{kLr, kBeta1, kBeta2, kEps, kDecay},
                  ZenFlowOptions::read(config, /*steps_per_epoch=*/1000)};
  torch::Tensor params = torch::zeros({int64_t(kNumel)}, torch::kFloat32);

  explicit PlanUnderTest(const Schedule &s) : config(RunConfig::parse(config_text(s), "staleness.toml")) {
    plan.allocate(params);
  }
  // Step t's gradients at the current parameters, through the plan's step protocol.
  void step(int64_t t) {
    torch::Tensor grads = torch::empty({int64_t(kNumel)}, torch::kFloat32);
    for (uint64_t i = 0; i < kNumel; ++i)
      grads[int64_t(i)] = float(gradient(t, i, double(params[int64_t(i)].item<float>())));
    plan.begin(t, kLr, params, grads, /*scale_known=*/true, 1.0f);
    plan.finish(/*mean_scale=*/1.0f, /*clip=*/1.0f, /*defer=*/false);
    plan.finish_step();
  }
};

// Runs the update plan `steps` steps under schedule s and compares the parameters the next
// forward reads after each step, then the master after the end of the run, with the reference.
void check_schedule(const Schedule &s, int64_t steps) {
  PlanUnderTest run(s);
  UpdatePlan &plan = run.plan;
  const torch::Tensor &params = run.params;
  Reference ref{s};
  for (int64_t t = 1; t <= steps; ++t) {
    run.step(t);
    ref.step(t);
    for (uint64_t i = 0; i < kNumel; ++i) {
      INFO("step " << t << ", element " << i << (on_device(i) ? " (selected)" : " (CPU)") << ", events "
                   << plan.events());
      REQUIRE(params[int64_t(i)].item<float>() == Approx(ref.visible[i]).margin(2e-5));
    }
  }
  plan.complete();
  ref.complete(steps);
  for (uint64_t i = 0; i < kNumel; ++i) {
    INFO("after the run, element " << i);
    CHECK(plan.master()[int64_t(i)].item<float>() == Approx(ref.master[i]).margin(2e-5));
    CHECK(params[int64_t(i)].item<float>() == Approx(ref.visible[i]).margin(2e-5));
  }
}

}  // namespace

TEST_CASE("ZenFlow's CPU updates land when the schedule says: a serial delayed-AdamW reference", "[zenflow]") {
  // staggered, U 1 with overlap: the other columns take the gradient of one step earlier.
  SECTION("staggered U 1 overlap") { check_schedule({true, true, 1, 0}, 9); }
  SECTION("staggered U 1 synchronous: AdamW") { check_schedule({true, false, 1, 0}, 9); }
  SECTION("staggered U 4 overlap") { check_schedule({true, true, 4, 0}, 13); }
  SECTION("staggered U 4 synchronous") { check_schedule({true, false, 4, 0}, 13); }
  SECTION("staggered U 3 overlap after 2 warm-up rounds") { check_schedule({true, true, 3, 2}, 12); }
  SECTION("deepspeed U 1 overlap") { check_schedule({false, true, 1, 0}, 9); }
  SECTION("deepspeed U 4 overlap") { check_schedule({false, true, 4, 0}, 14); }
  SECTION("deepspeed U 4 synchronous") { check_schedule({false, false, 4, 0}, 14); }
  SECTION("deepspeed U 3 synchronous after 2 warm-up rounds") { check_schedule({false, false, 3, 2}, 12); }
}

TEST_CASE("ZenFlow's corrections of the delayed update: serial references of their math", "[zenflow]") {
  // lookahead: each CPU result shows extrapolated by `factor` of its step from the last one; the
  // master keeps the result, and the run ends on it.
  SECTION("lookahead 1, staggered U 4 overlap") { check_schedule({true, true, 4, 0, "lookahead", 1.0}, 13); }
  SECTION("lookahead 0.5, staggered U 1 overlap") { check_schedule({true, true, 1, 0, "lookahead", 0.5}, 9); }
  SECTION("lookahead 1, U 3 synchronous after 2 warm-up rounds") {
    check_schedule({true, false, 3, 2, "lookahead", 1.0}, 12);
  }
  // age_gate: the gradient taken before the column's last CPU update was swapped in weighs `factor`
  // in its next window (0: dropped; at U 1 the column then moves every other step).
  SECTION("age_gate 0, staggered U 4 overlap") { check_schedule({true, true, 4, 0, "age_gate", 0.0}, 13); }
  SECTION("age_gate 0.5, staggered U 1 overlap") { check_schedule({true, true, 1, 0, "age_gate", 0.5}, 9); }
  SECTION("age_gate 0, staggered U 1 overlap") { check_schedule({true, true, 1, 0, "age_gate", 0.0}, 9); }
  SECTION("age_gate 0.25, U 3 overlap after 2 warm-up rounds") {
    check_schedule({true, true, 3, 2, "age_gate", 0.25}, 12);
  }
  // Without overlap nothing is stale: age_gate is the plain schedule.
  SECTION("age_gate 0, U 4 synchronous") { check_schedule({true, false, 4, 0, "age_gate", 0.0}, 13); }
}

TEST_CASE("ZenFlow's CPU update waits while the training thread launches the next forward", "[zenflow]") {
  // staggered U 1 with overlap: every step hands the other columns' CPU update over.
  PlanUnderTest run({true, true, 1, 0});
  const torch::Tensor before = run.plan.master().clone();
  run.step(1);
  // Held: given time to finish, the update thread has not touched the master.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto cpu_columns_moved = [&] {
    int moved = 0;
    for (uint64_t i = 0; i < kNumel; ++i)
      if (!on_device(i) && run.plan.master()[int64_t(i)].item<float>() != before[int64_t(i)].item<float>()) ++moved;
    return moved;
  };
  CHECK(cpu_columns_moved() == 0);
  run.plan.forward_launched();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // released: it runs without a drain
  CHECK(cpu_columns_moved() == int(kRows * kCols - 3 * kRows));  // all but the 3 selected columns
  run.plan.complete();
}
