// Speculative clipping: with train.clip_grad_norm, cpu_optimizer's update starts on each bucket
// before the global norm is known, with the unclipped scale, and is redone from a copy of the
// bucket's master and state where clipping fires. Oracles, bit for bit (param_digest): no offload
// (the same cpu_adam where the model computes) and the same offloaded run waiting for the norm (a
// host memory limit that leaves no room for the copy), on runs where clipping fires on some steps
// and not others: on 1 rank, with gradient accumulation, and under zero2 on 2 ranks.
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;

namespace {

// Buckets much smaller than a layer, so that the backward hands over many before the norm is known.
const std::string kOffload = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";

std::string workload(int grad_accum) {
  return "--set train.steps=8 --set train.micro_batch=32 --set train.grad_accum=" + std::to_string(grad_accum) +
         " --set optimizer.plugin=cpu_adam --set optimizer.threads=1 ";
}

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

// Per step of a run (steps.jsonl): the global norm, and what the update did before it was known
// ("update": speculated, redone or waited; empty where it cannot speculate).
struct Step {
  double norm = 0;
  std::string update;
};
std::vector<Step> steps_of(const test::StageRun &r) {
  std::vector<Step> out;
  std::istringstream lines(test::read_text(r.dir + "/steps.jsonl"));
  for (std::string line; std::getline(lines, line);)
    out.push_back({std::stod(test::json_field(line, "grad_norm")), test::json_field(line, "update")});
  return out;
}

// A clipping threshold that fires on some steps of the run and not on others: between the middle
// two norms of the same run that never clips.
double mixed_threshold(const std::string &name, const std::string &stage, int world, const std::string &base) {
  test::StageRun probe = test::run_stage_ok(name + "_probe", stage, world, base + "--set train.clip_grad_norm=1e6");
  std::vector<double> norms;
  for (const Step &s : steps_of(probe)) norms.push_back(s.norm);
  REQUIRE(norms.size() == 8);
  std::sort(norms.begin(), norms.end());
  return (norms[3] + norms[4]) / 2;
}

std::string gib(uint64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.12f", double(bytes) / double(1ull << 30));
  return text;
}

// The speculating run, no offload, and the run waiting for the norm give the same bits; the
// speculating run redid the update on a step that clipped, and only there.
void check_speculation(const std::string &name, const std::string &stage, int world, const std::string &base) {
  const double clip = mixed_threshold(name, stage, world, base);
  char threshold[64];
  std::snprintf(threshold, sizeof threshold, "%.17g", clip);
  const std::string clipped = base + "--set train.clip_grad_norm=" + threshold + " ";
  test::StageRun none = test::run_stage_ok(name + "_none", stage, world, clipped);
  test::StageRun spec = test::run_stage_ok(name + "_spec", stage, world, clipped + kOffload);
  CHECK_THAT(spec.outcome.output, Catch::Contains("clip speculation (master)"));  // in the memory plan
  // A host limit between the plan without the copy and with it: the run waits for the norm.
  const uint64_t planned = uint64_t(test::json_number(spec.summary, "planned_host_bytes") +
                                    test::json_number(spec.summary, "planned_pinned_bytes"));
  test::StageRun wait = test::run_stage_ok(name + "_wait", stage, world,
                                           clipped + kOffload + "--set run.host_memory_limit_gb=" + gib((planned - 1000) * uint64_t(world)));
  CHECK_THAT(wait.outcome.output, Catch::Contains("the update waits for the global norm"));

  CHECK(digest_of(spec).size() == 16);
  CHECK(digest_of(spec) == digest_of(none));
  CHECK(digest_of(spec) == digest_of(wait));
  CHECK(test::json_field(spec.summary, "final_loss") == test::json_field(none.summary, "final_loss"));
  int fired = 0, held = 0, redone = 0;
  for (const Step &s : steps_of(wait)) CHECK(s.update.empty());
  const std::vector<Step> steps = steps_of(spec);
  const std::vector<Step> reference = steps_of(none);
  REQUIRE(steps.size() == reference.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    INFO(name << " step " << i + 1 << " norm " << steps[i].norm << " threshold " << clip);
    CHECK(steps[i].norm == reference[i].norm);  // the same gradients every step
    const bool fires = steps[i].norm > clip;
    (fires ? fired : held) += 1;
    redone += steps[i].update == "redone";
    // A step after one that clipped waits for the norm; the others start before it and are redone
    // where clipping fires.
    const bool after_clipped = i > 0 && steps[i - 1].norm > clip;
    CHECK(steps[i].update == (after_clipped ? "waited" : fires ? "redone" : "speculated"));
  }
  CHECK(fired > 0);
  CHECK(held > 0);
  CHECK(redone > 0);
}

}  // namespace

TEST_CASE("cpu_optimizer with clipping starts the update before the norm, redoes it where clipping fires, and "
          "gives no offload's and the waiting update's bits", "[offload][clip]") {
  check_speculation("spec1", "zero0", 1, workload(1));
  check_speculation("spec_accum", "zero0", 1, workload(2));
}

TEST_CASE("cpu_optimizer's speculative clipping under zero2 on 2 ranks gives no offload's and the waiting update's "
          "bits", "[offload][clip][mpi]") {
  check_speculation("spec_zero2", "zero2", 2, workload(1));
}

TEST_CASE("updates that cannot be put back from a copy wait for the clipping norm as before, and zfcore estimate "
          "names the copy's bytes", "[offload][clip]") {
  const std::string clipped = workload(1) + "--set train.steps=2 --set train.clip_grad_norm=0.5 ";
  const std::string nvme_dir = test::scratch_dir("spec_nvme_state");
  const std::vector<std::pair<std::string, std::string>> waiting = {
      {"cpu_full", "--set offload.plugin=cpu_full --set offload.bucket_size=5000 "},
      {"nvme", "--set offload.plugin=nvme --set offload.bucket_size=5000 --set offload.path=" + nvme_dir + " "},
      {"zenflow", kOffload + "--set zenflow.update_interval=2 "},
      {"serial", kOffload + "--set offload.overlap=false "}};
  for (const auto &[name, sets] : waiting) {
    test::StageRun r = test::run_stage_ok("spec_not_" + name, "zero0", 1, clipped + sets);
    INFO(name << "\n" << r.outcome.output);
    CHECK_THAT(r.outcome.output, !Catch::Contains("clip speculation"));
    CHECK(test::json_field(r.summary, "clip_speculation_copy").empty());
  }
  // The copy is the host's master and state: the plan grows by the estimate's master + opt_state of zero0.
  test::StageRun spec = test::run_stage_ok("spec_plan", "zero0", 1, clipped + kOffload);
  test::StageRun plain = test::run_stage_ok("spec_plan_plain", "zero0", 1, workload(1) + "--set train.steps=2 " + kOffload);
  auto host = [](const test::StageRun &r) {
    return test::json_number(r.summary, "planned_host_bytes") + test::json_number(r.summary, "planned_pinned_bytes");
  };
  const uint64_t copy = uint64_t(host(spec) - host(plain));
  CHECK(copy > 0);
  test::Outcome estimate = test::run_command(test::zfcore() + " estimate " + test::default_stage_config() +
                                             " --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam "
                                             "--set train.clip_grad_norm=0.5");
  INFO(estimate.output);
  REQUIRE(estimate.exit_code == 0);
  CHECK_THAT(estimate.output, Catch::Contains("(" + std::to_string(copy) + " bytes) per rank in host memory"));
}
