// Under ZeRO-3 nothing whole is on any rank: each of 4 ranks draws, or reads from a sharded Hugging
// Face checkpoint, only its shard of the parameters, with cpu_optimizer and with ZenFlow. Oracle:
// the one-rank run (zero0, the whole model in memory) starts from the same parameters, so with
// optimizer.lr = 0 its param_digest is theirs; the checkpoint's bytes are read once over all ranks;
// a rank's host memory grows by its shard, not by the model.
#include "stage_runs.hpp"

#include "config/config.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace zf;

namespace {

// A small Qwen2 shape (the quickstart's text and byte tokenizer), one step that leaves the
// parameters as they started.
const std::string kShape = "--set model.type=qwen2 --set model.hidden=64 --set model.layers=2 --set model.heads=4 "
                           "--set model.kv_heads=2 --set model.intermediate=96 --set model.vocab=257 "
                           "--set model.max_seq=64 --set model.dtype=bfloat16 ";
const std::string kOneStep = "--set train.steps=1 --set train.micro_batch=2 --set data.seq_len=16 "
                             "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.lr=0 "
                             "--set optimizer.plugin=cpu_adam --set optimizer.threads=1 ";
// zero3 gathers every block (none stays resident).
const std::string kCpuOptimizer = "--set offload.plugin=cpu_optimizer --set stage.param_persistence_threshold=10 ";
const std::string kZenFlow = kCpuOptimizer + "--set zenflow.topk_ratio=0.25 ";

std::string quickstart() { return test::source_dir() + "/examples/quickstart.toml"; }
std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

// kShape's model, random (seed 77), exported as a two-shard Hugging Face checkpoint.
std::string sharded_checkpoint() {
  std::string dir = test::scratch_dir("shard_runs_hf") + "/qwen2";
  torch::manual_seed(77);
  auto model = make_model(RunConfig::parse("[model]\ntype = \"qwen2\"\nhidden = 64\nlayers = 2\nheads = 4\n"
                                           "kv_heads = 2\nintermediate = 96\nvocab = 257\nmax_seq = 64\n"
                                           "dtype = \"bfloat16\"\n", "shape.toml"));
  test::write_sharded_hf(*model, dir);
  return dir;
}

}  // namespace

TEST_CASE("zero3 on 4 ranks draws each shard where it lives: the 1-rank run's parameters", "[stage][mpi][shard]") {
  test::StageRun whole = test::run_stage_ok("shard_init_whole", "zero0", 1, kShape + kOneStep, quickstart());
  for (const std::string &offload : {kCpuOptimizer, kZenFlow}) {
    test::StageRun sharded = test::run_stage_ok("shard_init_zero3", "zero3", 4, kShape + kOneStep + offload, quickstart());
    INFO(offload << "\n" << sharded.outcome.output);
    CHECK(digest_of(sharded).size() == 16);
    CHECK(digest_of(sharded) == digest_of(whole));
    // Rank 0's ledger never held a whole parameter or gradient buffer, only its shard.
    CHECK(test::ledger_bytes(sharded.summary, "memory_peak_bytes", "host.params") == 0);
    CHECK(test::ledger_bytes(sharded.summary, "memory_peak_bytes", "host.grads") == 0);
    CHECK(test::ledger_bytes(sharded.summary, "memory_peak_bytes", "host.params.shard") > 0);
  }
}

TEST_CASE("zero3 on 4 ranks loads a sharded Hugging Face checkpoint, each rank reading only its shard",
          "[stage][mpi][shard][hf]") {
  const std::string init = "--set model.init_from=" + sharded_checkpoint() + " ";
  test::StageRun whole = test::run_stage_ok("shard_hf_whole", "zero0", 1, kShape + kOneStep + init, quickstart());
  const double file_bytes = test::json_number(whole.summary, "init_from_bytes_read");
  CHECK(file_bytes == test::json_number(whole.summary, "init_from_bytes_read_max_rank"));
  // The checkpoint's tensors (lm_head, embeddings, 2 layers of Qwen2 with q/k/v biases), 2 bytes each.
  const double parameters = 2 * 257 * 64 + 64 + 2 * (64 * 2 + 64 * 64 + 64 + 2 * (32 * 64 + 32) + 64 * 64 + 3 * 64 * 96);
  CHECK(file_bytes == 2 * parameters);
  for (const std::string &offload : {kCpuOptimizer, kZenFlow}) {
    test::StageRun sharded = test::run_stage_ok("shard_hf_zero3", "zero3", 4, kShape + kOneStep + init + offload,
                                                quickstart());
    INFO(offload << "\n" << sharded.outcome.output);
    CHECK(digest_of(sharded) == digest_of(whole));
    // Every byte of the checkpoint is read once over the 4 ranks, about a quarter by each.
    CHECK(test::json_number(sharded.summary, "init_from_bytes_read") == file_bytes);
    CHECK(test::json_number(sharded.summary, "init_from_bytes_read_max_rank") < 0.3 * file_bytes);
    CHECK_THAT(sharded.outcome.output, Catch::Contains("rank 3 read") && Catch::Contains("for its shard ["));
  }
}

TEST_CASE("zero3 on 4 ranks: a rank's host memory grows by its shard, not by the model", "[stage][mpi][shard]") {
  // 69.6 M parameters (two 65536 x 512 tables): 139 MB in bf16, a shard 35 MB.
  const std::string wide = "--set model.type=qwen2 --set model.hidden=512 --set model.layers=1 --set model.heads=8 "
                           "--set model.kv_heads=8 --set model.intermediate=1024 --set model.vocab=65536 "
                           "--set model.max_seq=64 --set model.dtype=bfloat16 ";
  const double model_bytes = 2.0 * (2 * 65536 * 512 + 2 * 512 + 4 * 512 * 512 + 3 * 512 * 1024 + 3 * 512);
  test::StageRun r = test::run_stage_ok("shard_init_rss", "zero3", 4,
                                        wide + kOneStep + kCpuOptimizer + "--set train.micro_batch=1", quickstart());
  const double growth = test::json_number(r.summary, "parameters_host_peak_growth_bytes");
  INFO(r.outcome.output);
  CHECK(growth > 0.2 * model_bytes);  // the shard is there
  CHECK(growth < 0.5 * model_bytes);
}

TEST_CASE("a model too large for the host is refused by the memory plan before anything of it is allocated",
          "[stage][shard]") {
  // The Llama-2-13B shape wants about 100 GB here; the process may map 6 GB in all, so allocating
  // the model before checking the plan would end in an allocator's error instead of the plan's.
  const std::string dir = test::scratch_dir("plan_first");
  std::ofstream(dir + "/big.toml") << "[model]\npreset = \"llama2-13b\"\ndtype = \"bfloat16\"\n"
                                      "[data]\ntype = \"text\"\npath = \"/usr/share/common-licenses/GPL-3\"\n"
                                      "tokenizer = \"byte\"\nseq_len = 16\n"
                                      "[train]\nsteps = 1\nmicro_batch = 1\n";
  const auto outcome = test::run_command("ulimit -v 6000000; " +
                                         test::stage_command(dir + "/out", "zero0", 1,
                                                             "--set run.host_memory_limit_gb=8", dir + "/big.toml"));
  INFO(outcome.output);
  CHECK(outcome.exit_code != 0);
  CHECK_THAT(outcome.output, Catch::Contains("the memory plan does not fit") && Catch::Contains("run.host_memory_limit_gb"));
}
