// Resume anywhere: a checkpoint written under zero2 on 4 ranks with cpu_optimizer continues under
// zero3 on 2 ranks, zero1 on 3, with nvme, with offload.ratio = 0.3, with ZenFlow and on 4 ranks
// under zero2. The oracle of each load is the checkpoint itself: a run with nothing left to train
// saves what it loaded in its own layout, and its gathered master and moments equal the written
// ones bit for bit; the resumed run then equals one resumed from that native checkpoint.
#include "checkpoint/reshard.hpp"
#include "engine/checkpoint_files.hpp"
#include "engine/resume_layout.hpp"
#include "checkpoint_values.hpp"
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// linear_stack (hidden 256, 4 layers: a shard spans several 64 KiB checksum blocks), cpu_adam, a
// global batch of 48 (4 ranks x micro_batch 4 x grad_accum 3) kept on the other layouts.
const std::string kCommon = "--set data.samples=192 --set train.micro_batch=4 --set optimizer.plugin=cpu_adam "
                            "--set optimizer.threads=1 --set train.lr_schedule=constant --set train.warmup_steps=0 "
                            "--set checkpoint.resume_batch=keep ";
const std::string kCpuOptimizer = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";

// The number just before `label` in the output ("(123 bytes of tensor data read": 123).
uint64_t number_before(const std::string &output, const std::string &label) {
  const size_t at = output.find(label);
  REQUIRE(at != std::string::npos);
  size_t start = at - 1;
  while (start > 0 && std::isdigit(static_cast<unsigned char>(output[start - 1]))) --start;
  return std::stoull(output.substr(start, at - 1 - start));
}

struct Layout {
  std::string name, stage;
  int world;
  std::string extra;
};

}  // namespace

TEST_CASE("a checkpoint of zero2 on 4 ranks with cpu_optimizer resumes on other ranks, stages and tiers, its state "
          "bit for bit", "[stage][mpi][checkpoint]") {
  test::StageRun written = test::run_stage_ok("reshard_written", "zero2", 4,
                                              kCommon + kCpuOptimizer + "--set train.grad_accum=3 --set train.steps=2");
  const std::string from = written.dir + "/checkpoints/step-00000002";
  test::Outcome info = test::run_command(test::zfcore() + " checkpoint info " + from);
  INFO(info.output);
  CHECK(info.exit_code == 0);
  CHECK_THAT(info.output, Catch::Contains("world size    4 ranks") && Catch::Contains("optimizer.exp_avg_sq") &&
                              Catch::Contains("stage zero2, offload cpu_optimizer, ZenFlow off, optimizer cpu_adam; global batch 48") &&
                              Catch::Contains("per tensor and per block") &&
                              Catch::Contains("exact         the fp32 master and every optimizer tensor") &&
                              Catch::Contains("the global batch 48 is kept with checkpoint.resume_batch") &&
                              Catch::Contains("ZenFlow       none in the checkpoint"));
  const std::string nvme = test::scratch_dir("reshard_nvme_files");
  const std::vector<Layout> layouts = {
      {"zero3_2", "zero3", 2, "--set stage.param_persistence_threshold=1000 "},
      {"zero1_3", "zero1", 3, ""},
      {"nvme_2", "zero2", 2, "--set offload.plugin=nvme --set offload.path=" + nvme + " "},
      {"ratio_2", "zero2", 2, kCpuOptimizer + "--set offload.ratio=0.3 "},
      {"zenflow_2", "zero2", 2, kCpuOptimizer + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 "},
      {"zero2_4", "zero2", 4, kCpuOptimizer},
  };
  for (const Layout &layout : layouts) {
    INFO(layout.name);
    // Nothing left to train (train.steps = 2): the run saves what it loaded in its own layout.
    test::StageRun loaded = test::run_stage_ok("reshard_" + layout.name, layout.stage, layout.world,
                                               kCommon + layout.extra + "--set train.steps=2 --set checkpoint.resume=" + from);
    const std::string native = loaded.dir + "/checkpoints/step-00000002";
    REQUIRE(fs::exists(native + "/checkpoint.json"));
    for (const char *tensor : {"master", "optimizer.exp_avg", "optimizer.exp_avg_sq"}) {
      INFO(tensor);
      CHECK(test::same_values(test::gathered(from, tensor), test::gathered(native, tensor)));
    }
    // A finished run writes no summary of its own; it prints the digest of the weights it loaded.
    CHECK_THAT(loaded.outcome.output, Catch::Contains("param_digest " + test::json_field(written.summary, "param_digest")));
    if (layout.name == "zero2_4") continue;  // the same layout: read as written
    CHECK_THAT(loaded.outcome.output, Catch::Contains("this run continues it on " + std::to_string(layout.world) + " rank(s)"));
    // Each rank read its own ranges: all ranks together about the checkpoint's tensor data once
    // (a shard's first and last 64 KiB checksum blocks may be read by two ranks), never it all per rank.
    const uint64_t read = number_before(loaded.outcome.output, "bytes of tensor data read");
    const uint64_t stored = uint64_t(test::gathered(from, "master").size()) * 3;
    CHECK(read >= stored);
    CHECK(read <= stored + uint64_t(layout.world) * 3 * 2 * 2 * (64 << 10) + (1 << 16));
  }
  // Training on: resumed from the 4-rank checkpoint or from the native one, the same bits.
  for (const Layout &layout : {layouts[0], layouts[1]}) {
    INFO(layout.name);
    const std::string go_on = kCommon + layout.extra + "--set train.steps=4 --set checkpoint.resume=";
    test::StageRun resharded = test::run_stage_ok("reshard_on_" + layout.name, layout.stage, layout.world, go_on + from);
    test::StageRun native = test::run_stage_ok("reshard_native_" + layout.name, layout.stage, layout.world,
                                               go_on + test::binary_dir() + "/test-scratch/reshard_" + layout.name +
                                                   "/checkpoints/step-00000002");
    CHECK(test::json_field(resharded.summary, "first_step") == "3");
    CHECK(test::json_field(resharded.summary, "param_digest") == test::json_field(native.summary, "param_digest"));
    CHECK(test::step_losses(resharded.dir) == test::step_losses(native.dir));
  }
  // Another global batch is refused unless checkpoint.resume_batch says how to continue.
  test::StageRun refused = test::run_stage("reshard_batch", "zero2", 2,
                                           kCommon + "--set checkpoint.resume_batch=same --set train.steps=3 "
                                                     "--set checkpoint.resume=" + from);
  CHECK(refused.outcome.exit_code != 0);
  CHECK_THAT(refused.outcome.output, Catch::Contains("global batch of 48") && Catch::Contains("resume_batch"));

  // In process: a rank of 3 reads only its shard's ranges and checks their blocks; a damaged range
  // is named by file, tensor and bytes, and a range elsewhere still reads.
  const std::vector<char> master = test::gathered(from, "master");
  const uint64_t numel = master.size() / 4;
  CheckpointShards shards = CheckpointShards::open(from);
  const uint64_t third = numel / 3;
  std::vector<char> part(size_t(third) * 4);
  shards.read("master", third, 2 * third, part.data());
  CHECK(std::memcmp(part.data(), master.data() + third * 4, part.size()) == 0);
  CHECK(shards.bytes_read() <= third * 4 + 4 * (64 << 10));
  const std::string damaged = test::scratch_dir("reshard_damaged") + "/step-00000002";
  fs::copy(from, damaged, fs::copy_options::recursive);
  test::flip_tensor_bytes(damaged + "/rank-00001.safetensors", "optimizer.exp_avg");
  CheckpointShards broken = CheckpointShards::open(damaged);
  std::vector<char> values(size_t(numel) * 4);
  CHECK_THROWS_WITH(broken.read("optimizer.exp_avg", 0, numel, values.data()),
                    Catch::Contains("rank-00001.safetensors: tensor 'optimizer.exp_avg' bytes [") &&
                        Catch::Contains("do not match their checksum"));
  CHECK_NOTHROW(broken.read("optimizer.exp_avg", 0, numel / 8, values.data()));  // rank 0's part
}

TEST_CASE("a ZenFlow run's final checkpoint continues on another layout without ZenFlow, one that owes CPU updates "
          "is refused there", "[stage][mpi][checkpoint]") {
  const std::string zenflow = kCommon + kCpuOptimizer + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 ";
  test::StageRun written = test::run_stage_ok("reshard_zenflow_written", "zero2", 2,
                                              zenflow + "--set train.grad_accum=6 --set train.steps=3 "
                                                        "--set checkpoint.every=1 --set checkpoint.keep=3");
  const std::string checkpoints = written.dir + "/checkpoints/";
  // The end of the run applied every owed update: its state is the optimizer's alone, carried bit for bit.
  test::StageRun loaded = test::run_stage_ok("reshard_zenflow_final", "zero3", 1,
                                             kCommon + kCpuOptimizer + "--set train.steps=3 --set checkpoint.resume=" +
                                                 checkpoints + "step-00000003");
  for (const char *tensor : {"master", "optimizer.exp_avg", "optimizer.exp_avg_sq"}) {
    INFO(tensor);
    CHECK(test::same_values(test::gathered(checkpoints + "step-00000003", tensor),
                            test::gathered(loaded.dir + "/checkpoints/step-00000003", tensor)));
  }
  CHECK_THAT(loaded.outcome.output, Catch::Contains("param_digest " + test::json_field(written.summary, "param_digest")));
  // Named by hand on another layout, the checkpoint is read only where this layout needs it, each
  // block checked as it is read: a damaged tensor it does not need (ZenFlow's gradient sums) is
  // not read, a damaged one it needs is named by file and tensor.
  const std::string copy = test::scratch_dir("reshard_zenflow_damaged") + "/step-00000003";
  fs::copy(checkpoints + "step-00000003", copy, fs::copy_options::recursive);
  test::flip_tensor_bytes(copy + "/rank-00001.safetensors", "optimizer.zenflow.gradient_sum");
  const std::string by_hand = kCommon + kCpuOptimizer + "--set train.steps=3 --set checkpoint.resume=" + copy;
  test::StageRun unneeded = test::run_stage_ok("reshard_zenflow_unneeded", "zero3", 1, by_hand);
  CHECK_THAT(unneeded.outcome.output, Catch::Contains("param_digest " + test::json_field(written.summary, "param_digest")));
  test::flip_tensor_bytes(copy + "/rank-00001.safetensors", "master");
  test::StageRun needed = test::run_stage("reshard_zenflow_needed", "zero3", 1, by_hand);
  CHECK(needed.outcome.exit_code != 0);
  CHECK_THAT(needed.outcome.output, Catch::Contains(copy + "/rank-00001.safetensors: tensor 'master' bytes [") &&
                                        Catch::Contains("do not match their checksum"));
  // Step 1 owes the CPU update of its summed gradients (update_interval 2): not on another layout.
  test::StageRun owed = test::run_stage("reshard_zenflow_owed", "zero3", 1,
                                        kCommon + kCpuOptimizer + "--set train.steps=3 --set checkpoint.resume=" +
                                            checkpoints + "step-00000001");
  CHECK(owed.outcome.exit_code != 0);
  CHECK_THAT(owed.outcome.output, Catch::Contains("ZenFlow CPU updates still owed") &&
                                      Catch::Contains("continue it with a [zenflow] table"));
}

// The oracle of a ZenFlow checkpoint that owes CPU updates: the run resumed from it on its own layout (exact,
// test_sharded_runs.cpp). On 2 ranks of micro_batch 4 each step's gradient is the sum of two micro-batches'
// gradients, which 1 rank (grad_accum 2, kept) and zero0 on 2 ranks add in the same order: every value of the
// runs can be the same bits.
TEST_CASE("a ZenFlow checkpoint that owes CPU updates continues on another number of ranks and stage as on its own "
          "layout, bit for bit", "[stage][mpi][checkpoint]") {
  const std::string zenflow = kCommon + kCpuOptimizer + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 "
                                                        "--set zenflow.select_strategy=step ";
  const std::vector<std::pair<std::string, std::string>> schedules = {
      // staggered: a selection every step flushes every group, on every layout alike. Uncorrected: age_gate
      // (the default) drops the gradient of a step whose start swapped a group in, here every group at
      // every other step, and step 2's checkpoint then owes nothing (age_gate's owed updates move in
      // test_reshard_resume.cpp).
      {"staggered", "--set zenflow.select_interval=1 --set zenflow.correction=none "},
      // deepspeed: the sums and counters are the run's, not a group's: nothing owed is regrouped
      {"deepspeed", "--set zenflow.schedule=deepspeed --set zenflow.select_interval=2 "},
  };
  for (const auto &[schedule, extra] : schedules) {
    INFO(schedule);
    const std::string config = zenflow + extra;
    test::StageRun written = test::run_stage_ok("reshard_owed_" + schedule, "zero2", 2,
                                                config + "--set train.steps=3 --set checkpoint.every=1 "
                                                         "--set checkpoint.keep=3");
    const std::string from = written.dir + "/checkpoints/step-00000002";
    REQUIRE_THAT(zenflow_owed(from), Catch::Contains("ZenFlow CPU updates still owed"));
    test::Outcome info = test::run_command(test::zfcore() + " checkpoint info " + from);
    INFO(info.output);
    CHECK_THAT(info.output, Catch::Contains("ZenFlow       " + schedule + " schedule; ZenFlow CPU updates still owed") &&
                                Catch::Contains(schedule == "staggered" ? "applied at the first step over the writer's "
                                                                          "groups"
                                                                        : "exact against its own layout"));
    const std::string go_on = config + "--set train.steps=5 --set checkpoint.resume=" + from + " ";
    test::StageRun own = test::run_stage_ok("reshard_owed_own_" + schedule, "zero2", 2, go_on);
    REQUIRE(test::step_losses(own.dir).size() == 3);
    const std::string nvme = "--set offload.plugin=nvme --set offload.path=" +
                             test::scratch_dir("reshard_owed_nvme_files_" + schedule) + " ";
    for (const Layout &layout : {Layout{"zero0_2", "zero0", 2, ""}, Layout{"zero2_1", "zero2", 1, ""},
                                 Layout{"zero3_1", "zero3", 1, "--set stage.param_persistence_threshold=1000 "},
                                 Layout{"nvme_1", "zero2", 1, nvme}}) {
      INFO(layout.name);
      test::StageRun moved = test::run_stage_ok("reshard_owed_" + schedule + "_" + layout.name, layout.stage,
                                                layout.world, go_on + layout.extra);
      CHECK_THAT(moved.outcome.output, Catch::Contains("this run continues it on " + std::to_string(layout.world)));
      if (schedule == "staggered") CHECK_THAT(moved.outcome.output, Catch::Contains("applied at the first step"));
      CHECK(test::json_field(moved.summary, "first_step") == "3");
      CHECK(test::step_losses(moved.dir) == test::step_losses(own.dir));
      CHECK(test::json_field(moved.summary, "param_digest") == test::json_field(own.summary, "param_digest"));
    }
    if (schedule != "staggered") continue;
    // Converted with nothing to train, the owed updates of the writer's groups have no step to be applied at.
    test::StageRun converted = test::run_stage("reshard_owed_converted", "zero2", 1,
                                               config + "--set train.steps=2 --set checkpoint.resume=" + from);
    CHECK(converted.outcome.exit_code != 0);
    CHECK_THAT(converted.outcome.output, Catch::Contains("train at least one step (raise train.steps)"));
  }
}

// The other way: a checkpoint of 1 rank continued on 2, where a writer's group cut to a rank's shard (half the
// model) is larger than the rank's own staging buffer (a quarter): the owed updates at the first step go through
// a staging buffer of the writer's largest group, then back to the planned one.
TEST_CASE("a staggered ZenFlow checkpoint of 1 rank that owes CPU updates continues on 2 ranks as on its own "
          "layout, bit for bit", "[stage][mpi][checkpoint]") {
  // Uncorrected, as above: under age_gate step 2's checkpoint would owe nothing.
  const std::string config = kCommon + kCpuOptimizer + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 "
                                                       "--set zenflow.select_strategy=step --set zenflow.select_interval=1 "
                                                       "--set zenflow.correction=none ";
  test::StageRun written = test::run_stage_ok("reshard_owed_one", "zero2", 1,
                                              config + "--set train.grad_accum=2 --set train.steps=3 "
                                                       "--set checkpoint.every=1 --set checkpoint.keep=3");
  const std::string from = written.dir + "/checkpoints/step-00000002";
  REQUIRE_THAT(zenflow_owed(from), Catch::Contains("a CPU update's result not yet applied"));
  const std::string go_on = config + "--set train.steps=5 --set checkpoint.resume=" + from + " ";
  test::StageRun own = test::run_stage_ok("reshard_owed_one_own", "zero2", 1, go_on);
  test::StageRun moved = test::run_stage_ok("reshard_owed_one_zero2_2", "zero2", 2, go_on);
  CHECK_THAT(moved.outcome.output, Catch::Contains("applied at the first step"));
  CHECK(test::ledger_bytes(moved.summary, "memory_peak_bytes", "host.zenflow.staging") >
        test::ledger_bytes(moved.summary, "memory_bytes", "host.zenflow.staging"));
  REQUIRE(test::step_losses(own.dir).size() == 3);
  CHECK(test::step_losses(moved.dir) == test::step_losses(own.dir));
  CHECK(test::json_field(moved.summary, "param_digest") == test::json_field(own.summary, "param_digest"));
}

// topk_ratio is read from the resumed run's config: the checkpoint's selection stays until the next selection is
// due (select_interval), which chooses with the new ratio; the same on the writer's layout and on another.
TEST_CASE("a ZenFlow checkpoint resumed with another zenflow.topk_ratio selects with it from its next selection",
          "[stage][mpi][checkpoint]") {
  const std::string zenflow = kCommon + kCpuOptimizer + "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 "
                                                        "--set zenflow.select_strategy=step ";
  test::StageRun written = test::run_stage_ok("reshard_topk_written", "zero2", 2,
                                              zenflow + "--set zenflow.select_interval=4 --set train.steps=2");
  CHECK(test::json_number(written.summary, "selected_column_fraction") == 0.25);
  const std::string go_on = zenflow + "--set zenflow.topk_ratio=0.5 --set checkpoint.resume=" + written.dir +
                            "/checkpoints/step-00000002 ";
  for (const Layout &layout : {Layout{"own", "zero2", 2, ""}, Layout{"zero0_2", "zero0", 2, ""}}) {
    INFO(layout.name);
    // Selected at step 1, next at step 5: steps 3 and 4 keep the checkpoint's columns, step 5 chooses with 0.5.
    test::StageRun kept = test::run_stage_ok("reshard_topk_kept_" + layout.name, layout.stage, layout.world,
                                             go_on + "--set zenflow.select_interval=4 --set train.steps=4");
    CHECK(test::json_number(kept.summary, "selected_column_fraction") == 0.25);
    CHECK(test::json_number(kept.summary, "zenflow_topk_ratio") == 0.5);
    test::StageRun chosen = test::run_stage_ok("reshard_topk_chosen_" + layout.name, layout.stage, layout.world,
                                               go_on + "--set zenflow.select_interval=4 --set train.steps=5");
    CHECK(test::json_number(chosen.summary, "selected_column_fraction") == 0.5);
  }
}

// cpu_full (the parameters in host memory too) holds the same flat state: a checkpoint of it continues under
// cpu_optimizer on other ranks, and one of cpu_optimizer under cpu_full, the state bit for bit and the weights'
// digest the same (each direction's loaded state saved in the new layout is the oracle).
TEST_CASE("cpu_full offload writes a checkpoint that other layouts resume, and resumes theirs, bit for bit",
          "[stage][mpi][checkpoint]") {
  const std::string full = "--set offload.plugin=cpu_full --set offload.bucket_size=5000 ";
  test::StageRun written = test::run_stage_ok("reshard_full_written", "zero3", 2,
                                              kCommon + full + "--set train.grad_accum=6 --set train.steps=2 "
                                                               "--set stage.param_persistence_threshold=1000");
  const std::string from_full = written.dir + "/checkpoints/step-00000002";
  test::StageRun cpu = test::run_stage_ok("reshard_full_to_cpu", "zero1", 3,
                                          kCommon + kCpuOptimizer + "--set train.steps=2 --set checkpoint.resume=" + from_full);
  test::StageRun back = test::run_stage_ok("reshard_cpu_to_full", "zero3", 4,
                                           kCommon + full + "--set train.steps=2 --set stage.param_persistence_threshold=1000 "
                                                            "--set checkpoint.resume=" + cpu.dir + "/checkpoints/step-00000002");
  for (const test::StageRun *run : {&cpu, &back}) {
    INFO(run->dir << "\n" << run->outcome.output);
    CHECK_THAT(run->outcome.output, Catch::Contains("this run continues it on") &&
                                        Catch::Contains("param_digest " + test::json_field(written.summary, "param_digest")));
    for (const char *tensor : {"master", "optimizer.exp_avg", "optimizer.exp_avg_sq"}) {
      INFO(tensor);
      CHECK(test::same_values(test::gathered(from_full, tensor), test::gathered(run->dir + "/checkpoints/step-00000002", tensor)));
    }
  }
  CHECK_THAT(back.outcome.output, Catch::Contains("offload cpu_optimizer); this run continues it on 4 rank(s) (stage "
                                                  "zero3, offload cpu_full"));
}

TEST_CASE("zfcore export writes a checkpoint's model on another number of ranks, as the run's own export does",
          "[stage][mpi][checkpoint]") {
  const std::string data = test::scratch_dir("reshard_export_data") + "/corpus.txt";
  {
    std::ofstream text(data);
    for (int i = 0; i < 40; ++i) text << "Line " << i << ": the quick brown fox jumps over " << i * 7 % 13 << " dogs.\n";
  }
  const std::string config = test::source_dir() + "/examples/quickstart.toml";
  const std::string tiny = "--set model.hidden=32 --set model.layers=2 --set model.heads=2 --set model.max_seq=32 "
                           "--set data.seq_len=32 --set data.path=" + data + " --set train.micro_batch=4 "
                           "--set sample.tokens=0 --set train.eval_every=0 ";
  test::StageRun written = test::run_stage_ok("reshard_export_run", "zero2", 2,
                                              tiny + "--set train.steps=2 --set checkpoint.export_hf=" +
                                                  test::binary_dir() + "/test-scratch/reshard_export_run/hf", config);
  const std::string out = test::scratch_dir("reshard_export_out");
  test::Outcome exported = test::run_command(test::zfcore() + " export " + written.dir + "/checkpoints/step-00000002 " +
                                             out + "/hf " + config + " --set run.progress=off --set run.output_dir=" +
                                             out + "/run " + tiny);
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  SafetensorsFile theirs = SafetensorsFile::open(written.dir + "/hf/model.safetensors");
  SafetensorsFile mine = SafetensorsFile::open(out + "/hf/model.safetensors");
  REQUIRE(mine.names() == theirs.names());
  for (const std::string &name : theirs.names()) {
    INFO(name);
    CHECK(mine.load(name).equal(theirs.load(name)));
  }
  CHECK(test::read_text(out + "/hf/config.json") == test::read_text(written.dir + "/hf/config.json"));
  CHECK_FALSE(fs::exists(out + "/run/checkpoints"));  // nothing trained, nothing saved
}
