// cpu_optimizer on GPUs: fp32 master and moments in pinned host memory, cpu_adam on the host's
// cores, gradients down and parameters up per bucket on the offload plugin's streams; cpu_full
// (the working parameters in host memory too, each block copied to the GPU around its use), and
// nvme (the moments in files). Oracles:
// the serial reference of the same plugin (identical bits: the same CPU math on the same
// gradients, with deterministic kernels), one GPU against two for the same global batch (as for
// the stages), and gpu_adam without offload for the loss (the same AdamW, two implementations).
#include "gpu_skip.hpp"

#include "runtime/device.hpp"
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>

using namespace zf;

namespace {

std::string tiny_gpt() { return test::source_dir() + "/tests/gpu/tiny_gpt.toml"; }

std::string offloaded(int grad_accum) {
  return "--set run.device=cuda --set run.deterministic=true --set model.dtype=bfloat16 --set train.micro_batch=8 "
         "--set optimizer.plugin=cpu_adam --set offload.plugin=cpu_optimizer --set offload.bucket_size=20000 "
         "--set train.grad_accum=" + std::to_string(grad_accum) + " ";
}

}  // namespace

TEST_CASE("cpu_optimizer on a GPU: the pipelined path equals the serial one and trains like gpu_adam",
          "[gpu][offload]") {
  test::require_gpus(1);
  test::StageRun piped = test::run_stage("gpu_off_piped", "zero0", 1, offloaded(1), tiny_gpt());
  INFO(piped.outcome.output);
  REQUIRE(piped.outcome.exit_code == 0);
  test::StageRun serial = test::run_stage("gpu_off_serial", "zero0", 1, offloaded(1) + "--set offload.overlap=false",
                                          tiny_gpt());
  INFO(serial.outcome.output);
  REQUIRE(serial.outcome.exit_code == 0);
  CHECK(test::json_field(piped.summary, "param_digest") == test::json_field(serial.summary, "param_digest"));
  CHECK(std::stoull(test::json_field(piped.summary, "planned_pinned_bytes")) > 0);

  test::StageRun gpu = test::run_stage("gpu_off_gpu_adam", "zero0", 1,
                                       "--set run.device=cuda --set run.deterministic=true --set model.dtype=bfloat16 "
                                       "--set train.micro_batch=8 --set optimizer.plugin=gpu_adam", tiny_gpt());
  INFO(gpu.outcome.output);
  REQUIRE(gpu.outcome.exit_code == 0);
  double a = std::stod(test::json_field(piped.summary, "final_loss"));
  double b = std::stod(test::json_field(gpu.summary, "final_loss"));
  CHECK(std::fabs(a - b) <= 2e-2 * std::fabs(b));
}

TEST_CASE("cpu_optimizer under zero0-zero3 on two GPUs reproduces one GPU's param_digest", "[gpu][offload][mpi]") {
  test::require_gpus(2);
  test::StageRun oracle = test::run_stage("gpu_off_oracle", "zero0", 1, offloaded(2), tiny_gpt());
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  for (const std::string &stage : {"zero0", "zero1", "zero2", "zero3"}) {
    std::string extra = stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "";
    test::StageRun r = test::run_stage("gpu_off_" + stage, stage, 2, offloaded(1) + extra, tiny_gpt());
    INFO(stage << " on 2 GPUs\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(test::json_field(r.summary, "param_digest") == test::json_field(oracle.summary, "param_digest"));
  }
}

TEST_CASE("a GPU optimizer under cpu_optimizer is refused with what to use instead", "[gpu][offload]") {
  test::require_gpus(1);
  test::StageRun r = test::run_stage("gpu_off_gpu_optimizer", "zero0", 1,
                                     offloaded(1) + "--set optimizer.plugin=gpu_adam --set train.steps=1", tiny_gpt());
  INFO(r.outcome.output);
  CHECK(r.outcome.exit_code != 0);
  CHECK_THAT(r.outcome.output, Catch::Contains("optimizer plugin 'gpu_adam' runs on the GPU") &&
                                   Catch::Contains("use a CPU optimizer (optimizer.plugin = ") &&
                                   Catch::Contains("\"cpu_adam\""));
}

TEST_CASE("cpu_full on a GPU equals cpu_optimizer bit for bit under zero0 and zero3, and resumes",
          "[gpu][offload][cpu_full]") {
  test::require_gpus(1);
  auto digest = [](const std::string &name, const std::string &stage, const std::string &extra) {
    test::StageRun r = test::run_stage(name, stage, 1, extra, tiny_gpt());
    INFO(name << "\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    return test::json_field(r.summary, "param_digest");
  };
  // A constant rate: the first half of a resumed run stops at step 4, which would end a cosine early.
  const std::string base = offloaded(2) + "--set checkpoint.every=2 --set train.steps=6 --set train.lr_schedule=constant ";
  const std::string full = base + "--set offload.plugin=cpu_full ";
  const std::string cpu = digest("gpu_full_cpu", "zero0", base);
  CHECK(digest("gpu_full", "zero0", full) == cpu);
  CHECK(digest("gpu_full_zero3", "zero3", full + "--set stage.param_persistence_threshold=1000") == cpu);
  // zero3 defers the update into the next forward: each block's gather (resident ones included)
  // first waits for its part of the update.
  CHECK(digest("gpu_cpu_zero3", "zero3", base + "--set stage.param_persistence_threshold=1000") == cpu);
  CHECK(digest("gpu_full_no_prefetch", "zero0", full + "--set offload.prefetch_size=0") == cpu);
  test::ResumedRun r = test::run_resumed("gpu_full_resume", "zero0", 1, full, 4, 6, tiny_gpt());
  test::require_resumed(r);
  CHECK(test::json_field(r.resumed.summary, "param_digest") == cpu);
}

TEST_CASE("cpu_full under zero0-zero3 on two GPUs reproduces one GPU's param_digest", "[gpu][offload][cpu_full][mpi]") {
  test::require_gpus(2);
  const std::string full = "--set offload.plugin=cpu_full ";
  test::StageRun oracle = test::run_stage("gpu_full_oracle", "zero0", 1, offloaded(2) + full, tiny_gpt());
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  for (const std::string &stage : {"zero0", "zero1", "zero2", "zero3"}) {
    std::string extra = stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "";
    test::StageRun r = test::run_stage("gpu_full_" + stage, stage, 2, offloaded(1) + full + extra, tiny_gpt());
    INFO(stage << " on 2 GPUs\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(test::json_field(r.summary, "param_digest") == test::json_field(oracle.summary, "param_digest"));
  }
}

TEST_CASE("nvme on a GPU equals cpu_optimizer bit for bit (io_uring, threads, ZenFlow) and resumes",
          "[gpu][offload][nvme]") {
  test::require_gpus(1);
  const std::string files = test::scratch_dir("gpu_nvme_files");
  const std::string nvme = "--set offload.plugin=nvme --set offload.path=" + files + " ";
  auto run_ok = [](const std::string &name, const std::string &extra) {
    test::StageRun r = test::run_stage(name, "zero0", 1, extra, tiny_gpt());
    INFO(name << "\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    return test::json_field(r.summary, "param_digest");
  };
  // A constant rate: the first half of a resumed run stops at step 4, which would end a cosine early.
  const std::string base = offloaded(2) + "--set checkpoint.every=2 --set train.steps=6 --set train.lr_schedule=constant ";
  const std::string cpu = run_ok("gpu_nvme_cpu", base);
  CHECK(run_ok("gpu_nvme_uring", base + nvme) == cpu);
  CHECK(run_ok("gpu_nvme_threads", base + nvme + "--set offload.io_backend=threads") == cpu);
  test::ResumedRun r = test::run_resumed("gpu_nvme_resume", "zero0", 1, base + nvme, 4, 6, tiny_gpt());
  test::require_resumed(r);
  CHECK(test::json_field(r.resumed.summary, "param_digest") == cpu);
  // ZenFlow's staggered groups are whole buckets: the disk's tiles (20480 elements) in both runs.
  const std::string zen =
      base + "--set zenflow.topk_ratio=0.2 --set zenflow.update_interval=2 --set offload.bucket_size=20480 ";
  CHECK(run_ok("gpu_nvme_zf", zen + nvme) == run_ok("gpu_nvme_zf_cpu", zen));
}

TEST_CASE("offload.ratio on a GPU: 0 is gpu_adam bit for bit, 0.3 repeats itself and resumes exactly",
          "[gpu][offload]") {
  test::require_gpus(1);
  // ratio 0: every element's update runs in the device optimizer (gpu_adam) through the offload
  // plugin, the same kernel over the same elements as without offload.
  const std::string gpu = "--set run.device=cuda --set run.deterministic=true --set model.dtype=bfloat16 "
                          "--set train.micro_batch=8 ";
  test::StageRun adam = test::run_stage_ok("gpu_ratio_adam", "zero0", 1, gpu + "--set optimizer.plugin=gpu_adam",
                                           tiny_gpt());
  test::StageRun zero = test::run_stage_ok("gpu_ratio_0", "zero0", 1, offloaded(1) + "--set offload.ratio=0",
                                           tiny_gpt());
  CHECK(test::json_field(zero.summary, "param_digest") == test::json_field(adam.summary, "param_digest"));
  // ratio 0.3: gpu_adam on 70% of the shard beside cpu_adam on the rest, every step.
  const std::string split = offloaded(1) + "--set offload.ratio=0.3 --set train.lr_schedule=constant "
                                           "--set checkpoint.every=4 ";
  test::StageRun a = test::run_stage_ok("gpu_ratio_a", "zero0", 1, split + "--set train.steps=8", tiny_gpt());
  test::StageRun b = test::run_stage_ok("gpu_ratio_b", "zero0", 1, split + "--set train.steps=8", tiny_gpt());
  CHECK(test::json_field(a.summary, "param_digest") == test::json_field(b.summary, "param_digest"));
  test::ResumedRun r = test::run_resumed("gpu_ratio_resume", "zero0", 1, split, 5, 8, tiny_gpt(), /*resume_step=*/4);
  test::require_resumed(r);
  CHECK(test::json_field(r.resumed.summary, "param_digest") == test::json_field(a.summary, "param_digest"));
  CHECK(std::stod(test::json_field(a.summary, "final_loss")) < std::stod(test::json_field(a.summary, "initial_loss")));
}

namespace {

// The first step's GPU peak that offload.ratio = "auto" reports ("... after the first step's peak of 41.2 MiB ...").
double reported_peak_bytes(const std::string &output) {
  const std::string marker = "the first step's peak of ";
  const size_t at = output.find(marker);
  if (at == std::string::npos) return 0;
  const std::string rest = output.substr(at + marker.size());
  const double value = std::stod(rest);
  const std::string unit = rest.substr(rest.find(' ') + 1, 3);
  const double scale = unit == "GiB" ? 1 << 30 : unit == "MiB" ? 1 << 20 : unit == "KiB" ? 1 << 10 : 1;
  return value * scale;
}

}  // namespace

TEST_CASE("offload.ratio auto on a GPU: all of a small model on the GPU, a share under a limit, repeats and resumes "
          "exactly",
          "[gpu][offload]") {
  test::require_gpus(1);
  const std::string base = offloaded(1) + "--set offload.ratio=auto --set train.lr_schedule=constant "
                                          "--set checkpoint.every=4 ";
  test::StageRun ample = test::run_stage_ok("gpu_ratio_auto", "zero0", 1, base, tiny_gpt());
  CHECK(ample.outcome.output.find("offload.ratio = auto chose 0: every element") != std::string::npos);
  CHECK(test::json_number(ample.summary, "offload_ratio") == 0);
  // A limit with room for about half of the shard's fp32 master and moments (12 bytes an element)
  // beside the first step's peak, less the tenth kept free.
  const double peak = reported_peak_bytes(ample.outcome.output);
  REQUIRE(peak > 0);
  const double needed = 3 * std::stod(test::json_field(ample.summary, "pinned.master"));  // 4 bytes an element
  const std::string limit = std::to_string((peak + 0.5 * needed) / 0.9 / double(1ull << 30));
  const std::string tight = base + "--set run.device_memory_limit_gb=" + limit + " ";
  test::StageRun a = test::run_stage_ok("gpu_ratio_auto_a", "zero0", 1, tight + "--set train.steps=8", tiny_gpt());
  test::StageRun b = test::run_stage_ok("gpu_ratio_auto_b", "zero0", 1, tight + "--set train.steps=8", tiny_gpt());
  const double share = test::json_number(a.summary, "offload_ratio");
  CHECK(share > 0.2);
  CHECK(share < 0.8);
  CHECK(test::json_field(a.summary, "param_digest") == test::json_field(b.summary, "param_digest"));
  test::ResumedRun r = test::run_resumed("gpu_ratio_auto_resume", "zero0", 1, tight, 5, 8, tiny_gpt(), 4);
  test::require_resumed(r);
  CHECK(r.resumed.outcome.output.find("auto chose") == std::string::npos);
  CHECK(test::json_field(r.resumed.summary, "param_digest") == test::json_field(a.summary, "param_digest"));
  CHECK(std::stod(test::json_field(a.summary, "final_loss")) < std::stod(test::json_field(a.summary, "initial_loss")));
}
