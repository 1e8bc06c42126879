// Every strategy runs on every family: the families whose layers differ most from Llama's (Gemma 3:
// (1 + w) norms around both branches, a tied head, sliding windows; Phi-3: fused qkv and gate_up;
// OLMo 3: norms after the branches over whole q/k projections; Gemma 3's image-text checkpoint: the
// language model under language_model.model., each rank reading its shard of it; Gemma 4: per-layer inputs
// and shared keys and values carried from block to block, fixed layer scalars, 3-D expert tensors) train from their
// transformers fixtures under zero3 with cpu_optimizer on 2 ranks to zero0's param_digest on one
// process, and ZenFlow's column selection over their matrices learns. The mixtures of experts (one 2-D
// matrix per expert, or gpt-oss's 3-D tensors of all of them; the load-balancing loss in the loss;
// Qwen3.5-MoE's read from fused 3-D tensors, each rank its shard's slices) do the same, and log that
// loss as its own column.
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace zf;

namespace {

std::string family_config(const std::string &family) {
  const std::string path = test::scratch_dir("family_runs_" + family) + "/train.toml";
  std::ofstream(path) << "[model]\ninit_from = \"" << test::source_dir() << "/tests/fixtures/families/" << family
                      << "\"\n[data]\ntype = \"synthetic\"\nvocab = 96\nseq_len = 31\n[train]\nsteps = 4\n"
                         "eval_every = 0\n[optimizer]\nplugin = \"cpu_adam\"\nlr = 0.01\nthreads = 1\n"
                         "[sample]\ntokens = 0\n";
  return path;
}

// zero0 on one process, then zero3 + cpu_optimizer on 2 ranks, which must end at zero0's param_digest.
// Returns zero0's run.
test::StageRun zero3_matches_zero0(const std::string &name, const std::string &config) {
  test::StageRun oracle = test::run_stage_ok(name + "_oracle", "zero0", 1,
                                             "--set train.micro_batch=2 --set train.grad_accum=2", config);
  const std::string digest = test::json_field(oracle.summary, "param_digest");
  REQUIRE(digest.size() == 16);
  test::StageRun sharded = test::run_stage_ok(
      name + "_zero3", "zero3", 2,
      "--set train.micro_batch=2 --set offload.plugin=cpu_optimizer --set stage.param_persistence_threshold=10",
      config);
  CHECK(test::json_field(sharded.summary, "param_digest") == digest);
  return oracle;
}

// ZenFlow's column selection over the family's matrices, on 2 ranks, lowers the loss.
void zenflow_learns(const std::string &name, const std::string &config) {
  test::StageRun zenflow = test::run_stage_ok(
      name + "_zenflow", "zero2", 2,
      "--set train.micro_batch=2 --set train.steps=8 --set offload.plugin=cpu_optimizer --set zenflow.topk_ratio=0.5",
      config);
  CHECK(test::json_number(zenflow.summary, "final_loss") < test::json_number(zenflow.summary, "initial_loss"));
}

}  // namespace

TEST_CASE("gemma3, gemma4 (dense and with experts), phi3, olmo3 and Gemma 3's image-text checkpoint train under "
          "zero3 + cpu_optimizer on 2 ranks to zero0's param_digest, and under ZenFlow", "[stage][mpi][model]") {
  const std::string family = GENERATE("gemma3", "gemma4", "gemma4_moe", "phi3", "olmo3", "gemma3_image_text");
  INFO(family);
  const std::string config = family_config(family);
  zero3_matches_zero0("family_" + family, config);
  zenflow_learns("family_" + family, config);
}

TEST_CASE("packed instruction data (data.packing) trains under zero3 + cpu_optimizer on 2 ranks to zero0's param_digest",
          "[stage][mpi][model][packing]") {
  const std::string directory = test::scratch_dir("family_runs_packed");
  {
    std::ofstream json(directory + "/alpaca.json");
    json << "[";
    for (int i = 0; i < 24; ++i)
      json << (i ? ",\n" : "") << "{\"instruction\": \"Say " << i << ".\", \"output\": \""
           << std::string(size_t(1 + i * 11 % 90), char('a' + i % 26)) << "\"}";
    json << "]";
  }
  const std::string config = directory + "/train.toml";
  std::ofstream(config) << "[model]\ntype = \"llama\"\nhidden = 32\nlayers = 2\nheads = 4\nkv_heads = 2\nvocab = 257\n"
                           "max_seq = 512\n[data]\ntype = \"alpaca\"\npacking = true\nseq_len = 512\npath = \""
                        << directory << "/alpaca.json\"\n[train]\nsteps = 3\neval_every = 0\n[optimizer]\n"
                           "plugin = \"cpu_adam\"\nlr = 0.01\nthreads = 1\n[sample]\ntokens = 0\n";
  zero3_matches_zero0("packed", config);
}

TEST_CASE("qwen3_moe, mixtral, olmoe, gpt_oss and qwen3_5_moe (experts stored fused, a shared expert) train under "
          "zero3 + cpu_optimizer on 2 ranks to zero0's param_digest, and under ZenFlow, logging the load-balancing loss",
          "[stage][mpi][model][moe]") {
  const std::string family = GENERATE("qwen3_moe", "mixtral", "olmoe", "gpt_oss", "qwen3_5_moe_image_text");
  INFO(family);
  const std::string config = family_config(family);
  const test::StageRun oracle = zero3_matches_zero0("family_" + family, config);
  std::ifstream steps(oracle.dir + "/steps.jsonl");
  std::stringstream rows;
  rows << steps.rdbuf();
  CHECK(rows.str().find("\"aux_loss\":") != std::string::npos);
  std::ifstream csv(oracle.dir + "/steps.csv");
  std::string header;
  std::getline(csv, header);
  CHECK(header.find(",aux_loss,") != std::string::npos);
  zenflow_learns("family_" + family, config);
}
