// The ZeRO stages compute what zero0 computes. Oracle: zero0 on one process with the same global
// batch. With 1 and 2 ranks every gradient element is a sum of at most two partial sums (float
// addition is commutative), so the parameters are bit-identical: same param_digest. With 3 ranks
// the sum has three terms and MPI's all-reduce and reduce-scatter may associate them differently,
// so there the final loss is compared within a relative 1e-5 (a few float roundings per step);
// likewise for gradient accumulation on several ranks (zero2/zero3 reduce every micro-step).
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

using namespace zf;

namespace {

const std::vector<std::string> kStages = {"zero0", "zero1", "zero2", "zero3"};

// 96 samples per optimizer step whatever the world size: 48 per micro-batch x 2 micro-steps on
// one process, 48 x 1 on two ranks.
std::string workload(int grad_accum, bool clip) {
  std::string s = "--set train.steps=5 --set train.micro_batch=48 --set train.grad_accum=" +
                  std::to_string(grad_accum) + " --set train.lr_schedule=cosine ";
  if (clip) s += "--set train.clip_grad_norm=0.5 ";
  return s;
}

// Small buckets, so that buckets split layers and the bucket loops run; zero3 releases every
// block (threshold below any block), so each forward and backward gathers.
std::string buckets(const std::string &stage) {
  if (stage == "zero0") return "--set stage.reduce_bucket_size=10000 ";  // elements, as zero1-zero3 count them
  std::string s = "--set stage.reduce_bucket_size=10000 --set stage.allgather_bucket_size=7000 ";
  if (stage == "zero3") s += "--set stage.param_persistence_threshold=1000 ";
  return s;
}

}  // namespace

TEST_CASE("zero1, zero2 and zero3 on 1 and 2 ranks give zero0's param_digest", "[stage][mpi]") {
  for (bool clip : {false, true}) {
    test::StageRun oracle = test::run_stage("eq_oracle", "zero0", 1, workload(2, clip));
    INFO(oracle.outcome.output);
    REQUIRE(oracle.outcome.exit_code == 0);
    std::string digest = test::json_field(oracle.summary, "param_digest");
    REQUIRE(digest.size() == 16);
    for (const std::string &stage : kStages) {
      for (int world : {1, 2}) {
        test::StageRun r = test::run_stage("eq_" + stage, stage, world, workload(world == 1 ? 2 : 1, clip) + buckets(stage));
        INFO(stage << " on " << world << " ranks, clipping " << clip << "\n" << r.outcome.output);
        REQUIRE(r.outcome.exit_code == 0);
        CHECK(test::json_field(r.summary, "world_size") == std::to_string(world));
        CHECK(test::json_field(r.summary, "param_digest") == digest);
        CHECK(test::json_field(r.summary, "final_loss") == test::json_field(oracle.summary, "final_loss"));
      }
    }
    if (clip) {  // clipping was active, so the global norm over shards was what decided the step
      std::string steps = test::read_text(oracle.dir + "/steps.jsonl");
      CHECK(std::stod(test::json_field(steps, "grad_norm")) > 0.5);
    }
  }
}

TEST_CASE("zero1, zero2 and zero3 on 3 ranks (padded shards) train like zero0", "[stage][mpi]") {
  // 3 x 32 = 96 samples per step, as one process with 3 micro-steps of 32.
  std::string common = "--set train.steps=5 --set train.micro_batch=32 --set train.clip_grad_norm=0.5 ";
  test::StageRun oracle = test::run_stage("eq3_oracle", "zero0", 1, common + "--set train.grad_accum=3");
  REQUIRE(oracle.outcome.exit_code == 0);
  double expected = std::stod(test::json_field(oracle.summary, "final_loss"));
  for (const std::string &stage : kStages) {
    test::StageRun r = test::run_stage("eq3_" + stage, stage, 3, common + buckets(stage));
    INFO(stage << "\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(test::json_field(r.summary, "world_size") == "3");
    CHECK(std::stod(test::json_field(r.summary, "final_loss")) == Approx(expected).epsilon(1e-5));
  }
  // Gradient accumulation over ranks: zero2 and zero3 sum every micro-step over ranks
  // ((g0 + g1) + (g2 + g3)) where zero0 sums each rank's micro-steps first ((g0 + g2) + (g1 + g3)),
  // so they agree within the same tolerance, not bit for bit.
  std::string accumulating = "--set train.steps=5 --set train.micro_batch=24 --set train.grad_accum=2 ";
  test::StageRun accum_oracle = test::run_stage("eq_accum_oracle", "zero0", 2, accumulating);
  REQUIRE(accum_oracle.outcome.exit_code == 0);
  for (const std::string &stage : {std::string("zero2"), std::string("zero3")}) {
    test::StageRun r = test::run_stage("eq_accum_" + stage, stage, 2, accumulating + buckets(stage));
    INFO(stage << " with grad_accum 2\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(std::stod(test::json_field(r.summary, "final_loss")) ==
          Approx(std::stod(test::json_field(accum_oracle.summary, "final_loss"))).epsilon(1e-5));
  }
  // Another learning rate moves the loss by far more than the tolerance: the comparison can fail.
  test::StageRun other = test::run_stage("eq3_other", "zero2", 3, common + "--set optimizer.lr=2e-3");
  REQUIRE(other.outcome.exit_code == 0);
  CHECK(std::stod(test::json_field(other.summary, "final_loss")) != Approx(expected).epsilon(1e-5));
}

TEST_CASE("a stage plugin built for ABI 1.0 still loads and trains on this host", "[stage][mpi][abi]") {
  // tests/engine/faulty_stage.cpp speaks ABI 1.0 (shorter stage table, no gather_block or
  // reduce_block); told to fail after the last step, it is zero0, so it must compute zero0's digest.
  std::string common = workload(1, true) + "--set run.plugin_path=" + test::binary_dir() + "/tests/abi_plugins ";
  test::StageRun zero0 = test::run_stage("abi10_zero0", "zero0", 2, common);
  test::StageRun old = test::run_stage("abi10_faulty", "faulty", 2, common + "--set stage.fail_step=1000");
  INFO(old.outcome.output);
  REQUIRE(zero0.outcome.exit_code == 0);
  REQUIRE(old.outcome.exit_code == 0);
  CHECK(test::json_field(old.summary, "param_digest") == test::json_field(zero0.summary, "param_digest"));
}

TEST_CASE("zero0's deprecated bucket_mb still works, with a warning giving reduce_bucket_size", "[stage][mpi]") {
  test::StageRun oracle = test::run_stage("bucket_mb_oracle", "zero0", 2, workload(1, false) + buckets("zero0"));
  test::StageRun old = test::run_stage("bucket_mb_old", "zero0", 2, workload(1, false) + "--set stage.bucket_mb=0.04 ");
  INFO(oracle.outcome.output << "\n" << old.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  REQUIRE(old.outcome.exit_code == 0);
  CHECK_THAT(old.outcome.output, Catch::Contains("stage.bucket_mb is deprecated: write stage.reduce_bucket_size = 10485"));
  CHECK(test::json_field(old.summary, "param_digest") == test::json_field(oracle.summary, "param_digest"));
}

// train.grad_accum_dtype = "float32" (DeepSpeed's data_types.grad_accum_dtype = "fp32", FSDP2's
// reduce_dtype) on a bf16 model: every stage sums the micro-steps and the ranks in fp32 and hands
// the fp32 sum to the optimizer. With two terms per element (2 micro-steps on 1 rank, or 1 on 2
// ranks) the fp32 sums are the same whatever the order, so all four stages on 1 and 2 ranks give
// the param_digest of zero0 accumulating on one process. The reduction is in fp32: reducing the
// same bf16 gradients in bf16 (grad_accum_dtype = "auto") gives another digest.
TEST_CASE("with fp32 gradient accumulation a bf16 model trains to zero0's param_digest under every stage on 1 and 2 "
          "ranks, reducing in fp32", "[stage][mpi]") {
  const std::string wide = "--set model.dtype=bfloat16 --set train.grad_accum_dtype=float32 ";
  test::StageRun oracle = test::run_stage("eq_fp32_oracle", "zero0", 1, workload(2, true) + wide);
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  const std::string digest = test::json_field(oracle.summary, "param_digest");
  REQUIRE(digest.size() == 16);
  for (const std::string &stage : kStages) {
    for (int world : {1, 2}) {
      test::StageRun r = test::run_stage("eq_fp32_" + stage, stage, world, workload(world == 1 ? 2 : 1, true) + wide +
                                                                               buckets(stage));
      INFO(stage << " on " << world << " ranks\n" << r.outcome.output);
      REQUIRE(r.outcome.exit_code == 0);
      CHECK(test::json_field(r.summary, "param_digest") == digest);
    }
  }
  for (const std::string &stage : {std::string("zero0"), std::string("zero2")}) {
    test::StageRun in_bf16 = test::run_stage("eq_bf16_" + stage, stage, 2, workload(1, true) +
                                             "--set model.dtype=bfloat16 " + buckets(stage));
    INFO(in_bf16.outcome.output);
    REQUIRE(in_bf16.outcome.exit_code == 0);
    CHECK(test::json_field(in_bf16.summary, "param_digest") != digest);
  }
  // Four terms (2 micro-steps on 2 ranks): zero2/zero3 sum each micro-step over ranks first, so
  // they agree with zero0 within fp32 rounding.
  const std::string accumulating = "--set train.steps=5 --set train.micro_batch=24 --set train.grad_accum=2 " + wide;
  test::StageRun accum_oracle = test::run_stage("eq_fp32_accum_oracle", "zero0", 2, accumulating);
  REQUIRE(accum_oracle.outcome.exit_code == 0);
  for (const std::string &stage : {std::string("zero1"), std::string("zero2"), std::string("zero3")}) {
    test::StageRun r = test::run_stage("eq_fp32_accum_" + stage, stage, 2, accumulating + buckets(stage));
    INFO(stage << " with grad_accum 2\n" << r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    CHECK(std::stod(test::json_field(r.summary, "final_loss")) ==
          Approx(std::stod(test::json_field(accum_oracle.summary, "final_loss"))).epsilon(1e-5));
  }
}
