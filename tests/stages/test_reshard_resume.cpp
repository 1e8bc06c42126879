// Resume anywhere, continued: checkpoint.resume = "auto" on another layout reads the newest
// checkpoint once, checking each block as it loads it (a damaged block it reads falls back to the
// checkpoint before it; one it does not read is never looked at).
#include "engine/checkpoint_files.hpp"
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// As test_reshard.cpp: linear_stack, cpu_adam, the global batch kept on other layouts.
const std::string kCommon = "--set data.samples=192 --set train.micro_batch=4 --set optimizer.plugin=cpu_adam "
                            "--set optimizer.threads=1 --set train.lr_schedule=constant --set train.warmup_steps=0 "
                            "--set checkpoint.resume_batch=keep --set offload.plugin=cpu_optimizer "
                            "--set offload.bucket_size=5000 ";

}  // namespace

TEST_CASE("resume = auto on another layout reads the newest checkpoint once, a damaged block falling back to the one "
          "before", "[stage][mpi][checkpoint]") {
  test::StageRun written = test::run_stage_ok("reshard_auto_written", "zero2", 2,
                                              kCommon + "--set train.grad_accum=2 --set train.steps=3 "
                                                        "--set checkpoint.every=1 --set checkpoint.keep=3");
  const std::string checkpoints = written.dir + "/checkpoints";
  // On 1 rank under zero3, resumed from the untouched step 2 by hand: the state a fallback must reach.
  const std::string on_one = kCommon + "--set train.steps=3 ";
  test::StageRun oracle = test::run_stage_ok("reshard_auto_oracle", "zero3", 1,
                                             on_one + "--set checkpoint.resume=" + checkpoints + "/step-00000002");
  const std::string store = test::scratch_dir("reshard_auto_store");
  fs::copy(checkpoints, store, fs::copy_options::recursive);

  // Rank 1's generator state: 1 rank takes rank 0's, so this layout never reads it. The resume is
  // that of the untouched step 3 (nothing left to train: it prints the digest of what it loaded).
  test::flip_tensor_bytes(store + "/step-00000003/rank-00001.safetensors", "rng");
  test::StageRun unread = test::run_stage_ok("reshard_auto_unread", "zero3", 1, on_one + "--set checkpoint.dir=" + store);
  CHECK_THAT(unread.outcome.output, Catch::Contains("resumed from " + store + "/step-00000003 (step 3)") &&
                                        Catch::Contains("param_digest " + test::json_field(written.summary, "param_digest")) &&
                                        !Catch::Contains("is damaged"));

  // Rank 1's master, which this layout reads: found while loading, the run goes on from step 2 and
  // trains step 3 as the oracle did, bit for bit.
  test::flip_tensor_bytes(store + "/step-00000003/rank-00001.safetensors", "master");
  test::StageRun fallback = test::run_stage_ok("reshard_auto_fallback", "zero3", 1,
                                               on_one + "--set checkpoint.dir=" + store);
  CHECK_THAT(fallback.outcome.output,
             Catch::Contains("checkpoint " + store + "/step-00000003 is damaged (" + store +
                             "/step-00000003/rank-00001.safetensors: tensor 'master' bytes [") &&
                 Catch::Contains("found while loading it") && Catch::Contains("trying the one before it") &&
                 Catch::Contains("resumed from " + store + "/step-00000002 (step 2)"));
  CHECK(fs::exists(store + "/step-00000003.damaged/checkpoint.json"));
  CHECK(test::json_field(fallback.summary, "first_step") == "3");
  CHECK(test::step_losses(fallback.dir) == test::step_losses(oracle.dir));
  CHECK(test::json_field(fallback.summary, "param_digest") == test::json_field(oracle.summary, "param_digest"));
}
