// ZenFlow on a GPU: the selected columns' update runs in gpu_adam over a compact copy, the scores
// in the topk selectors' CUDA kernel, the sum goes down and the CPU's result comes up on the offload
// plugin's streams, ordered by events. Oracles: gpu_adam without offload (topk_ratio = 1: the same
// kernel over the same elements, bit for bit with deterministic kernels), the run itself twice (the
// schedule is deterministic), and a resumed run mid-interval.
#include "gpu_skip.hpp"

#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

using namespace zf;

namespace {

std::string tiny_gpt() { return test::source_dir() + "/tests/gpu/tiny_gpt.toml"; }

const std::string kGpu = "--set run.device=cuda --set run.deterministic=true --set model.dtype=bfloat16 "
                         "--set train.micro_batch=8 ";
const std::string kZenFlow = kGpu + "--set optimizer.plugin=cpu_adam --set offload.plugin=cpu_optimizer "
                                    "--set offload.bucket_size=20000 --set zenflow.update_interval=3 ";

test::StageRun run_ok(const std::string &name, const std::string &extra) {
  test::StageRun r = test::run_stage(name, "zero0", 1, extra, tiny_gpt());
  INFO(name << "\n" << r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  return r;
}

}  // namespace

TEST_CASE("ZenFlow on a GPU: topk_ratio = 1 is gpu_adam, runs repeat, and the CPU half trains", "[gpu][zenflow]") {
  test::require_gpus(1);
  test::StageRun adam = run_ok("gpu_zf_adam", kGpu + "--set optimizer.plugin=gpu_adam");
  test::StageRun all = run_ok("gpu_zf_all", kZenFlow + "--set zenflow.topk_ratio=1");
  CHECK(test::json_field(all.summary, "param_digest") == test::json_field(adam.summary, "param_digest"));

  test::StageRun a = run_ok("gpu_zf_a", kZenFlow + "--set zenflow.topk_ratio=0.1 --set selector.plugin=topk_l2");
  test::StageRun b = run_ok("gpu_zf_b", kZenFlow + "--set zenflow.topk_ratio=0.1 --set selector.plugin=topk_l2");
  CHECK(test::json_field(a.summary, "param_digest") == test::json_field(b.summary, "param_digest"));
  CHECK(std::stod(test::json_field(a.summary, "zenflow_cpu_updates")) >= 2);
  CHECK(std::stod(test::json_field(a.summary, "final_loss")) < std::stod(test::json_field(a.summary, "initial_loss")));
}

TEST_CASE("ZenFlow on a GPU: topk_ratio auto is gpu_adam where every column fits, the least fraction under a "
          "small limit", "[gpu][zenflow]") {
  test::require_gpus(1);
  test::StageRun adam = run_ok("gpu_zf_auto_adam", kGpu + "--set optimizer.plugin=gpu_adam");
  test::StageRun fits = run_ok("gpu_zf_auto_fits", kZenFlow + "--set zenflow.topk_ratio=auto");
  CHECK(test::json_field(fits.summary, "param_digest") == test::json_field(adam.summary, "param_digest"));
  CHECK(test::json_field(fits.summary, "zenflow_topk_ratio") == "1");
  // 1 MiB is less than the first step's peak: the least fraction auto chooses, and the run trains.
  test::StageRun small = run_ok("gpu_zf_auto_small", kZenFlow + "--set zenflow.topk_ratio=auto "
                                                                "--set run.device_memory_limit_gb=0.001");
  CHECK(std::stod(test::json_field(small.summary, "zenflow_topk_ratio")) == 0.01);
  CHECK(std::stod(test::json_field(small.summary, "zenflow_cpu_updates")) >= 2);
}

TEST_CASE("ZenFlow on a GPU resumed mid-interval repeats the uninterrupted run, under both schedules", "[gpu][zenflow]") {
  test::require_gpus(1);
  // A constant learning rate: tiny_gpt's cosine schedule depends on train.steps.
  for (const std::string schedule : {"staggered", "deepspeed"}) {
    const std::string base = kZenFlow + "--set zenflow.topk_ratio=0.2 --set checkpoint.every=4 "
                                        "--set train.lr_schedule=constant --set zenflow.schedule=" + schedule + " ";
    test::StageRun whole = run_ok("gpu_zf_whole_" + schedule, base + "--set train.steps=8");
    test::ResumedRun r = test::run_resumed("gpu_zf_resume_" + schedule, "zero0", 1, base, 5, 8, tiny_gpt(),
                                           /*resume_step=*/4);
    INFO(schedule);
    test::require_resumed(r);
    CHECK(test::json_field(r.resumed.summary, "param_digest") == test::json_field(whole.summary, "param_digest"));
  }
}
