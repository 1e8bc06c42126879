// Resume anywhere, continued: checkpoint.resume = "auto" on another layout reads the newest
// checkpoint once, checking each block as it loads it (a damaged block it reads falls back to the
// checkpoint before it; one it does not read is never looked at), and ZenFlow's default staggered
// schedule choosing its columns every few steps (select_interval > 1) continues on another layout
// as a run on that layout from the same state does.
#include "engine/checkpoint_files.hpp"
#include "engine/resume_layout.hpp"
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

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

// ZenFlow's default schedule (staggered) choosing its columns every 4 steps: the checkpoint of step 2
// owes CPU updates of its groups, and the next selection is at step 5 (selected at step 1). Resumed
// under zero3 on 1 rank and trained to step 6 without a stop, or resumed from that run's own
// checkpoint of step 4 (owing its own groups' updates) on its own layout: the same bits.
// And the final checkpoint (nothing owed), converted into the new layout and resumed from there, or
// resumed from directly: the same bits.
TEST_CASE("staggered ZenFlow with select_interval > 1 continues on another layout as a run there from the same state",
          "[stage][mpi][checkpoint]") {
  const std::string zenflow = kCommon + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 "
                                        "--set zenflow.select_strategy=step --set zenflow.select_interval=4 ";
  test::StageRun written = test::run_stage_ok("reshard_select_written", "zero2", 2,
                                              zenflow + "--set train.grad_accum=2 --set train.steps=3 "
                                                        "--set checkpoint.every=1 --set checkpoint.keep=3");
  const std::string from = written.dir + "/checkpoints/step-00000002";
  REQUIRE_THAT(zenflow_owed(from), Catch::Contains("ZenFlow CPU updates still owed"));
  const std::string moved = zenflow + "--set stage.param_persistence_threshold=1000 --set checkpoint.resume=" + from + " ";
  test::StageRun whole = test::run_stage_ok("reshard_select_whole", "zero3", 1, moved + "--set train.steps=6");
  // Its checkpoint of step 4 is one inside the run (the one at its end, step 5, holds a finished run).
  test::StageRun first = test::run_stage_ok("reshard_select_first", "zero3", 1,
                                            moved + "--set train.steps=5 --set checkpoint.every=1 "
                                                    "--set checkpoint.keep=3");
  test::StageRun second = test::run_stage_ok("reshard_select_second", "zero3", 1,
                                             zenflow + "--set stage.param_persistence_threshold=1000 --set train.steps=6 "
                                                       "--set checkpoint.resume=" + first.dir +
                                                 "/checkpoints/step-00000004");
  REQUIRE(test::step_losses(whole.dir).size() == 4);
  std::map<int, std::string> stopped = test::step_losses(second.dir);
  for (int step : {3, 4}) stopped[step] = test::step_losses(first.dir)[step];
  CHECK(stopped == test::step_losses(whole.dir));
  CHECK(test::json_field(second.summary, "param_digest") == test::json_field(whole.summary, "param_digest"));

  const std::string final_one = written.dir + "/checkpoints/step-00000003";
  const std::string on_one = zenflow + "--set stage.param_persistence_threshold=1000 ";
  test::StageRun converted = test::run_stage_ok("reshard_select_converted", "zero3", 1,
                                                on_one + "--set train.steps=3 --set checkpoint.resume=" + final_one);
  const std::string native = converted.dir + "/checkpoints/step-00000003";
  REQUIRE(fs::exists(native + "/checkpoint.json"));
  test::StageRun direct = test::run_stage_ok("reshard_select_direct", "zero3", 1,
                                             on_one + "--set train.steps=7 --set checkpoint.resume=" + final_one);
  test::StageRun again = test::run_stage_ok("reshard_select_native", "zero3", 1,
                                            on_one + "--set train.steps=7 --set checkpoint.resume=" + native);
  CHECK(test::json_field(direct.summary, "first_step") == "4");
  CHECK(test::step_losses(direct.dir) == test::step_losses(again.dir));
  CHECK(test::json_field(direct.summary, "param_digest") == test::json_field(again.summary, "param_digest"));
}
