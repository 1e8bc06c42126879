// At a reselection a column that comes to the device keeps its one master and moment chain:
// ZenFlow neither copies its fp32 master again from the bf16 working weights nor zeroes its
// moments (DeepSpeed's ZenFlow does both). The update plan runs alone on a CPU run in bf16 (the
// host stands in for the GPU); the oracle is one AdamW step in double precision from the host's
// master and moments just before the reselection.
#include "config/config.hpp"
#include "plugin/plugin_registry.hpp"
#include "plugin/plugin_set.hpp"
#include "update/update_plan.hpp"
#include "update/zenflow.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace zf;

namespace {

constexpr uint64_t kRows = 8, kCols = 12, kBias = 8, kNumel = kRows * kCols + kBias;
constexpr double kLr = 0.05, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kDecay = 0.01;

// Columns 2, 5, 9 carry the largest gradients for the first two steps, then 0, 4, 7: the selection
// at step 3 (select_interval 2) moves the device's three columns (topk 0.25 of 12).
bool heavy(int64_t step, uint64_t column) {
  return step < 3 ? column == 2 || column == 5 || column == 9 : column == 0 || column == 4 || column == 7;
}
float gradient(int64_t step, uint64_t i, double p) {
  const double curvature = i < kRows * kCols && heavy(step, i / kRows) ? 30.0 : 1.0 + 0.1 * double(i % 7);
  return float(curvature * (p - 1.0) + 0.2 * std::sin(double(step) * 1.7 + double(i) * 0.37));
}

torch::Tensor named(const std::vector<std::pair<std::string, torch::Tensor>> &state, const std::string &name) {
  for (const auto &[n, t] : state)
    if (n == name) return t.to(torch::kFloat64).clone();
  FAIL("no optimizer state named " << name);
  return {};
}

}  // namespace

TEST_CASE("a ZenFlow reselection keeps the fp32 master and the moments of newly selected columns", "[zenflow]") {
  RunConfig config = RunConfig::parse(
      "[optimizer]\nplugin = \"cpu_adam\"\nthreads = 1\n[offload]\nplugin = \"cpu_optimizer\"\nbucket_size = 40\n"
      "[selector]\nplugin = \"topk_l1\"\n"
      "[zenflow]\ntopk_ratio = 0.25\nselect_strategy = \"step\"\nselect_interval = 2\nupdate_interval = 1\n"
      "overlap_step = false\n",
      "reselection.toml");
  std::unique_ptr<Runtime> runtime = Runtime::single_cpu();
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  PluginSet plugins(config, *runtime, registry);
  const std::vector<zf_segment> segments = {
      {"w", 0, kRows * kCols, kRows, kCols, 0, ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS},
      {"b", kRows * kCols, kBias, kBias, 1, 0, ZF_SEGMENT_NO_DECAY}};
  const zf_block block{"block", 0, kNumel, 0, 2};
  const zf_layout layout{sizeof(zf_layout), 2, segments.data(), 1, 0, &block, kNumel, 1};
  UpdatePlan plan(*runtime, plugins, layout, 0, kNumel, torch::kBFloat16, ZF_TIER_HOST,
                  OptimizerSettings{kLr, kBeta1, kBeta2, kEps, kDecay}, ZenFlowOptions::read(config, 1000));
  torch::Tensor params = torch::zeros({int64_t(kNumel)}, torch::kBFloat16);
  plan.allocate(params);

  torch::Tensor master, m, v, grads;
  for (int64_t t = 1; t <= 3; ++t) {
    if (t == 3) {  // the host's master and moments just before the reselection
      auto state = plan.state_tensors();
      master = plan.master().to(torch::kFloat64).clone();
      m = named(state, "exp_avg");
      v = named(state, "exp_avg_sq");
    }
    grads = torch::empty({int64_t(kNumel)}, torch::kBFloat16);
    for (uint64_t i = 0; i < kNumel; ++i)
      grads[int64_t(i)] = gradient(t, i, double(params[int64_t(i)].item<float>()));
    plan.begin(t, kLr, params, grads, /*scale_known=*/true, 1.0f);
    plan.finish(1.0f, 1.0f, /*defer=*/false);
    plan.finish_step();
    if (t == 3) REQUIRE(plan.events().find("select") != std::string::npos);
  }
  auto state = plan.state_tensors();  // the device's columns written back into the host's
  const torch::Tensor after = plan.master().to(torch::kFloat64), m_after = named(state, "exp_avg");
  int checked = 0;
  for (uint64_t column : {0, 4, 7})
    for (uint64_t row = 0; row < kRows; ++row) {
      const int64_t i = int64_t(column * kRows + row);
      const double g = double(grads[i].item<float>()), m0 = m[i].item<double>(), v0 = v[i].item<double>();
      const double p0 = master[i].item<double>();
      // The master carried fp32 digits the bf16 weights do not have, and the moments were not zero.
      REQUIRE(p0 != double(float(c10::BFloat16(float(p0)))));
      REQUIRE(m0 != 0.0);
      const double m1 = kBeta1 * m0 + (1 - kBeta1) * g, v1 = kBeta2 * v0 + (1 - kBeta2) * g * g;
      const double expected = p0 * (1 - kLr * kDecay) - kLr * (m1 / (1 - std::pow(kBeta1, 3.0))) /
                                                            (std::sqrt(v1 / (1 - std::pow(kBeta2, 3.0))) + kEps);
      INFO("column " << column << ", row " << row);
      CHECK(after[i].item<double>() == Approx(expected).margin(1e-6));
      CHECK(m_after[i].item<double>() == Approx(m1).margin(1e-7));
      ++checked;
    }
  CHECK(checked == 24);
}
