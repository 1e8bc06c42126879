// cpu_optimizer computes what no offload computes. Oracle: the same stage, world size and batch
// with offload.plugin = "none" and the same CPU optimizer (cpu_adam): the update is elementwise,
// so splitting it into buckets, copying gradients to another buffer and parameters back changes
// no bit. Hence identical param_digest for zero0-zero3 on 1-3 ranks, with gradient accumulation
// (every micro-step counted) and with clipping (the norm is the no-offload norm), in fp32 and in
// bf16 (where the optimizer writes the bf16 copy into a buffer that is copied up).
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

using namespace zf;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kStages = {"zero0", "zero1", "zero2", "zero3"};

std::string workload(int grad_accum, bool clip) {
  std::string s = "--set train.steps=4 --set train.micro_batch=32 --set train.grad_accum=" +
                  std::to_string(grad_accum) + " --set optimizer.plugin=cpu_adam --set optimizer.threads=1 ";
  if (clip) s += "--set train.clip_grad_norm=0.5 ";
  return s;
}

// Buckets much smaller than a layer, so that the backward hands over many of them.
const std::string kOffload = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";

std::string stage_buckets(const std::string &stage) {
  if (stage == "zero3") return "--set stage.param_persistence_threshold=1000 ";
  return "";
}

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

}  // namespace

TEST_CASE("cpu_optimizer gives no offload's param_digest under zero0-zero3 on 1 and 2 ranks", "[offload][mpi]") {
  for (bool clip : {false, true}) {
    for (const std::string &stage : kStages) {
      for (int world : {1, 2}) {
        int accum = world == 1 ? 2 : 1;
        std::string base = workload(accum, clip) + stage_buckets(stage);
        test::StageRun none = test::run_stage("off_none_" + stage, stage, world, base);
        INFO(stage << " on " << world << " ranks, clipping " << clip << "\n" << none.outcome.output);
        REQUIRE(none.outcome.exit_code == 0);
        test::StageRun off = test::run_stage("off_cpu_" + stage, stage, world, base + kOffload);
        INFO(off.outcome.output);
        REQUIRE(off.outcome.exit_code == 0);
        CHECK(digest_of(off).size() == 16);
        CHECK(digest_of(off) == digest_of(none));
        CHECK(test::json_field(off.summary, "final_loss") == test::json_field(none.summary, "final_loss"));
        if (clip) {  // the step was clipped by the same global norm
          std::string steps_none = test::read_text(none.dir + "/steps.jsonl");
          std::string steps_off = test::read_text(off.dir + "/steps.jsonl");
          CHECK(std::stod(test::json_field(steps_none, "grad_norm")) > 0.5);
          CHECK(test::json_field(steps_off, "grad_norm") == test::json_field(steps_none, "grad_norm"));
        }
      }
    }
  }
}

TEST_CASE("model.block_order = interleaved gives the model order's param_digest under zero0-zero3, with and "
          "without cpu_optimizer, on 2 ranks", "[offload][mpi]") {
  // 7 layers (not a power of two), clipping (the norm over every rank's shard), buckets smaller
  // than a layer: zero0 and zero1 reduce the top of the buffer as the backward makes it final, which
  // interleaved holds early and late layers side by side; cpu_optimizer hands its buckets over in
  // the order the backward finishes them and the rest in the forward's order.
  const std::string base = workload(1, true) + "--set model.layers=7 --set stage.reduce_bucket_size=10000 ";
  const std::string interleaved = "--set model.block_order=interleaved ";
  test::StageRun oracle = test::run_stage("order_oracle", "zero0", 2, base);
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  std::string written;  // the last run's checkpoint
  for (const std::string &stage : kStages) {
    for (const std::string &offload : {std::string(), kOffload}) {
      test::StageRun r = test::run_stage("order_" + stage, stage, 2, base + stage_buckets(stage) + offload + interleaved);
      written = r.dir + "/checkpoints/step-00000004";
      INFO(stage << (offload.empty() ? "" : " + cpu_optimizer") << "\n" << r.outcome.output);
      REQUIRE(r.outcome.exit_code == 0);
      CHECK(digest_of(r) == digest_of(oracle));
      CHECK(test::json_field(r.summary, "final_loss") == test::json_field(oracle.summary, "final_loss"));
    }
  }
  // The orders lay the parameters out differently: a checkpoint resumes only under its own.
  REQUIRE(fs::exists(written));
  test::StageRun other = test::run_stage("order_resume", "zero3", 2, base + kOffload + "--set checkpoint.resume=" + written);
  CHECK(other.outcome.exit_code != 0);
  CHECK_THAT(other.outcome.output, Catch::Contains("written for another model layout"));
}

TEST_CASE("cpu_optimizer on 3 ranks and in bf16 gives no offload's param_digest", "[offload][mpi]") {
  for (const std::string &stage : {"zero1", "zero3"}) {
    std::string base = workload(2, false) + stage_buckets(stage);
    test::StageRun none = test::run_stage("off3_none_" + stage, stage, 3, base);
    INFO(none.outcome.output);
    REQUIRE(none.outcome.exit_code == 0);
    test::StageRun off = test::run_stage("off3_cpu_" + stage, stage, 3, base + kOffload);
    INFO(off.outcome.output);
    REQUIRE(off.outcome.exit_code == 0);
    CHECK(digest_of(off) == digest_of(none));
  }
  std::string bf16 = workload(2, true) + "--set model.dtype=bfloat16 ";
  test::StageRun none = test::run_stage("offbf_none", "zero2", 2, bf16);
  INFO(none.outcome.output);
  REQUIRE(none.outcome.exit_code == 0);
  test::StageRun off = test::run_stage("offbf_cpu", "zero2", 2, bf16 + kOffload);
  INFO(off.outcome.output);
  REQUIRE(off.outcome.exit_code == 0);
  CHECK(digest_of(off) == digest_of(none));
}

TEST_CASE("the pipelined per-bucket update equals the serial reference bit for bit", "[offload]") {
  std::string base = workload(1, false) + "--set offload.plugin=cpu_optimizer ";
  test::StageRun serial = test::run_stage("off_serial", "zero0", 1, base + "--set offload.overlap=false");
  INFO(serial.outcome.output);
  REQUIRE(serial.outcome.exit_code == 0);
  for (const char *bucket : {"64", "5000", "1000000"}) {
    test::StageRun piped =
        test::run_stage("off_piped", "zero0", 1, base + "--set offload.overlap=true --set offload.bucket_size=" + bucket);
    INFO("bucket_size " << bucket << "\n" << piped.outcome.output);
    REQUIRE(piped.outcome.exit_code == 0);
    CHECK(digest_of(piped) == digest_of(serial));
  }
  // The step breakdown shows where an offloaded step spends its time.
  for (const char *timer : {"cpu_update", "grad_copy_wait", "update_wait", "param_copy_wait"})
    CHECK_FALSE(test::json_field(serial.summary, timer).empty());
}

TEST_CASE("an offloaded run resumed mid-run repeats the uninterrupted run bit for bit", "[offload]") {
  std::string base = workload(1, true) + kOffload + "--set checkpoint.every=2 ";
  test::StageRun whole = test::run_stage("off_whole", "zero0", 1, base + "--set train.steps=6");
  INFO(whole.outcome.output);
  REQUIRE(whole.outcome.exit_code == 0);
  test::ResumedRun r = test::run_resumed("off_resume", "zero0", 1, base, 4, 6);  // checkpoints at 2 and 4
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(whole));
}

TEST_CASE("the memory plan is printed, equals the ledger, and a plan that cannot fit is refused", "[offload]") {
  std::string base = workload(1, false) + kOffload;
  test::StageRun fits = test::run_stage("off_plan", "zero0", 1, base);
  INFO(fits.outcome.output);
  REQUIRE(fits.outcome.exit_code == 0);
  CHECK(fits.outcome.output.find("memory plan per rank:") != std::string::npos);
  // Pinned memory holds exactly what the plan said: master, both moments, gradients and nothing else.
  std::string planned = test::json_field(fits.summary, "planned_pinned_bytes");
  REQUIRE_FALSE(planned.empty());
  CHECK(std::stoull(planned) > 0);
  CHECK(test::json_field(fits.summary, "pinned") == planned);

  test::StageRun refused = test::run_stage("off_refused", "zero0", 1, base + "--set run.host_memory_limit_gb=0.0001");
  INFO(refused.outcome.output);
  CHECK(refused.outcome.exit_code != 0);
  CHECK(refused.outcome.output.find("the memory plan does not fit") != std::string::npos);
  CHECK(refused.outcome.output.find("moment_dtype = \"bf16\"") != std::string::npos);
  CHECK(refused.outcome.output.find("run.host_memory_limit_gb") != std::string::npos);
  // The ways out come from the run's plugins (their estimate_memory's advice).
  CHECK(refused.outcome.output.find("stage zero0: a ZeRO stage over more ranks") != std::string::npos);
  CHECK(refused.outcome.output.find("offload cpu_optimizer: offload.plugin = \"nvme\"") != std::string::npos);
}

TEST_CASE("zfcore estimate predicts the offload tiers a run plans, and reads presets", "[offload][estimate]") {
  std::string sets = " --set offload.plugin=cpu_optimizer --set optimizer.plugin=cpu_adam";
  test::Outcome estimate = test::run_command(test::zfcore() + " estimate --bytes " + test::source_dir() +
                                             "/examples/linear_stack.toml" + sets);
  INFO(estimate.output);
  REQUIRE(estimate.exit_code == 0);
  test::StageRun run = test::run_stage("off_estimate", "zero0", 1, "--set train.steps=1" + sets);
  INFO(run.outcome.output);
  REQUIRE(run.outcome.exit_code == 0);
  // linear_stack's blocks are exact: the estimate's pinned bytes for zero0 are the run's plan.
  std::string planned = test::json_field(run.summary, "planned_pinned_bytes");
  CHECK_THAT(test::chosen_estimate_row(estimate.output, "offload cpu_optimizer"), Catch::Contains(" " + planned + " "));

  std::string preset = test::scratch_dir("off_estimate_preset") + "/preset.toml";
  test::run_command("printf '[model]\\npreset = \"qwen2.5-0.5b\"\\n' > " + preset);
  test::Outcome qwen = test::run_command(test::zfcore() + " estimate --bytes " + preset);
  INFO(qwen.output);
  CHECK(qwen.exit_code == 0);
  CHECK_THAT(qwen.output, Catch::Contains("qwen2, 494032768 parameters"));
}
