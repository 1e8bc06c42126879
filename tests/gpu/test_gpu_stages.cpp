// The ZeRO stages on GPUs over NCCL, and GPU checkpoints. Oracle: one GPU running zero0 on the
// same global batch (two micro-batches accumulated where two GPUs take one each). With
// deterministic kernels every gradient element is then the same sum of two partial sums (float
// addition is commutative; a tied weight's two uses are summed before they reach its gradient),
// so every stage on two GPUs must reproduce the single GPU's param_digest bit for bit.
#include "gpu_skip.hpp"

#include "runtime/device.hpp"
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace zf;

namespace {

std::string tiny_gpt() { return test::source_dir() + "/tests/gpu/tiny_gpt.toml"; }

// The tiny GPT (tied head) in bf16 with gpu_adam and deterministic kernels.
std::string on_gpu(int grad_accum) {
  return "--set run.device=cuda --set run.deterministic=true --set optimizer.plugin=gpu_adam "
         "--set model.dtype=bfloat16 --set train.micro_batch=8 --set train.grad_accum=" + std::to_string(grad_accum) + " ";
}

// Small buckets, so that they split blocks; zero3 gathers every block before each use.
std::string buckets(const std::string &stage) {
  if (stage == "zero0") return "--set stage.reduce_bucket_size=13107 ";
  std::string s = "--set stage.reduce_bucket_size=30000 --set stage.allgather_bucket_size=20000 ";
  if (stage == "zero3") s += "--set stage.param_persistence_threshold=1000 ";
  return s;
}

// zero3 with prefetch, 12 steps of one micro-step: the tied embedding is gathered once per step, a
// layer twice (forward and backward).
void check_zero3_gathers(const std::string &summary) {
  const std::string gathers = summary.substr(summary.find("\"param_gathers\":"));
  CHECK(test::json_field(gathers, "embeddings") == "12");
  CHECK(test::json_field(gathers, "transformer.h.1") == "24");
}

}  // namespace

TEST_CASE("zero0-zero3 on two GPUs reproduce one GPU's param_digest for the same global batch",
          "[gpu][stage][mpi]") {
  test::require_gpus(2);
  test::StageRun oracle = test::run_stage("gpu_eq_oracle", "zero0", 1, on_gpu(2), tiny_gpt());
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  std::string digest = test::json_field(oracle.summary, "param_digest");
  REQUIRE(digest.size() == 16);
  for (const std::string &stage : {"zero0", "zero1", "zero2", "zero3"}) {
    test::StageRun r = test::run_stage("gpu_eq_" + std::string(stage), stage, 2, on_gpu(1) + buckets(stage), tiny_gpt());
    INFO(stage << " on 2 GPUs\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(test::json_field(r.summary, "communicator") == "nccl");
    CHECK(test::json_field(r.summary, "param_digest") == digest);
    CHECK(test::json_field(r.summary, "final_loss") == test::json_field(oracle.summary, "final_loss"));
    if (stage == std::string("zero3")) check_zero3_gathers(r.summary);
  }
}

// One GPU: every shard is the whole model, so the stages must compute zero0's parameters bit for
// bit; zero3 gathers its bf16 blocks from the fp32 master (cast as it copies, where gpu_adam
// writes zero0's bf16 parameters in its own pass), and zero2/zero3 hold the gradient shard only
// from the backward to the update. zero3 gathers the tied embedding once per micro-step.
TEST_CASE("zero2 and zero3 on one GPU reproduce zero0's param_digest and keep no second copy", "[gpu][stage]") {
  test::require_gpus(1);
  test::StageRun oracle = test::run_stage_ok("gpu_one_oracle", "zero0", 1, on_gpu(1), tiny_gpt());
  const std::string digest = test::json_field(oracle.summary, "param_digest");
  for (const std::string &stage : {"zero2", "zero3"}) {
    test::StageRun r = test::run_stage_ok("gpu_one_" + stage, stage, 1, on_gpu(1) + buckets(stage), tiny_gpt());
    INFO(stage << "\n" << r.outcome.output);
    CHECK(test::json_field(r.summary, "param_digest") == digest);
    CHECK(test::json_field(r.summary, "final_loss") == test::json_field(oracle.summary, "final_loss"));
    const uint64_t master = test::ledger_bytes(r.summary, "memory_bytes", "device.master");  // 4 bytes an element
    REQUIRE(master > 0);
    CHECK(test::ledger_bytes(r.summary, "memory_peak_bytes", "device.grads.shard") == master / 2);  // bf16
    CHECK(test::ledger_bytes(r.summary, "memory_bytes", "device.grads.shard") == 0);
    CHECK(test::ledger_bytes(r.summary, "memory_peak_bytes", "device.params.shard") == 0);
    if (stage == "zero3") check_zero3_gathers(r.summary);
  }
}

TEST_CASE("a GPU run resumed from its checkpoint ends where the uninterrupted run ends", "[gpu][checkpoint]") {
  test::require_gpus(1);
  std::vector<std::pair<std::string, int>> cases = {{"zero0", 1}};
  if (cuda_device_count() >= 2) cases.emplace_back("zero3", 2);  // sharded master, state and parameters
  for (const auto &[stage, world] : cases) {
    INFO(stage << " on " << world << " GPU(s)");
    // Dropout, so that the GPU's generator state must come back too.
    std::string run = on_gpu(1) + buckets(stage) + "--set train.steps=10 --set model.dropout=0.1 ";
    test::StageRun whole = test::run_stage("gpu_resume_whole_" + stage, stage, world, run, tiny_gpt());
    INFO(whole.outcome.output);
    REQUIRE(whole.outcome.exit_code == 0);
    // The same run with checkpoints every 4 steps, then a run resumed from the one of step 4.
    std::string checkpoints = test::scratch_dir("gpu_resume_checkpoints_" + stage);
    std::string saving = run + "--set checkpoint.every=4 --set checkpoint.keep=5 --set checkpoint.dir=" + checkpoints + " ";
    test::StageRun first = test::run_stage("gpu_resume_first_" + stage, stage, world, saving, tiny_gpt());
    INFO(first.outcome.output);
    REQUIRE(first.outcome.exit_code == 0);
    test::StageRun resumed = test::run_stage("gpu_resume_second_" + stage, stage, world,
                                             run + "--set checkpoint.resume=" + checkpoints + "/step-00000004", tiny_gpt());
    INFO(resumed.outcome.output);
    REQUIRE(resumed.outcome.exit_code == 0);
    CHECK_THAT(resumed.outcome.output, Catch::Contains("resumed from"));
    CHECK(test::json_field(resumed.summary, "param_digest") == test::json_field(whole.summary, "param_digest"));
    CHECK(test::json_field(resumed.summary, "final_loss") == test::json_field(whole.summary, "final_loss"));
  }
}
