// Resume anywhere: a checkpoint written under zero2 on 4 ranks with cpu_optimizer continues under
// zero3 on 2 ranks, zero1 on 3, with nvme, with offload.ratio = 0.3, with ZenFlow and on 4 ranks
// under zero2. The oracle of each load is the checkpoint itself: a run with nothing left to train
// saves what it loaded in its own layout, and its gathered master and moments equal the written
// ones bit for bit; the resumed run then equals one resumed from that native checkpoint.
#include "checkpoint/reshard.hpp"
#include "engine/checkpoint_files.hpp"
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
                              Catch::Contains("per tensor and per block"));
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
  // Step 1 owes the CPU update of its summed gradients (update_interval 2): not on another layout.
  test::StageRun owed = test::run_stage("reshard_zenflow_owed", "zero3", 1,
                                        kCommon + kCpuOptimizer + "--set train.steps=3 --set checkpoint.resume=" +
                                            checkpoints + "step-00000001");
  CHECK(owed.outcome.exit_code != 0);
  CHECK_THAT(owed.outcome.output, Catch::Contains("ZenFlow CPU updates still owed") &&
                                      Catch::Contains("exact only on the layout that wrote it"));
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
