// Hugging Face checkpoints: save then load reproduces a model bit for bit, the files use HF's
// names, layouts and config.json fields, init_from checks the shape, and the zoo's logits and loss
// match transformers' on the fixtures in tests/fixtures/hf/ (generated with transformers).
#include "model/hf_checkpoint.hpp"
#include "checkpoint/safetensors.hpp"
#include "params/flat_buffers.hpp"
#include "model/transformer_shape.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <fstream>

using namespace zf;
using test::next_token_batch;
using test::run_blocks;
using test::tiny_model;

namespace {

nlohmann::json read_json(const std::string &path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

}  // namespace

TEST_CASE("model: save_hf_checkpoint then load_hf_checkpoint reproduces every parameter bit for bit", "[model][hf]") {
  auto [type, tie] = GENERATE(std::make_pair("gpt2", true), std::make_pair("gpt2", false),
                              std::make_pair("llama", false), std::make_pair("qwen2", true));
  std::string dtype = GENERATE("float32", "bfloat16");
  INFO(type << " tie=" << tie << " " << dtype);
  std::string dir = test::scratch_dir(std::string("hf_round_trip_") + type + (tie ? "_tied" : "") + "_" + dtype);
  auto saved = tiny_model(type, tie, 1, dtype);
  save_hf_checkpoint(*saved, dir);
  {
    // Our logits next to the export, so tests/models/check_export.py can hold transformers to them.
    torch::NoGradGuard no_grad;
    torch::manual_seed(3);
    torch::Tensor ids = torch::randint(61, {2, 12}, torch::kLong);
    write_safetensors(dir + "/zf_logits.safetensors",
                      {{"input_ids", ids}, {"logits", run_blocks(*saved, next_token_batch(ids)).to(torch::kFloat32)}});
  }
  auto loaded = tiny_model(type, tie, 2, dtype);  // other random values, overwritten by the load
  load_hf_checkpoint(*loaded, dir);
  auto a = saved->parameters(), b = loaded->parameters();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(torch::equal(a[i].tensor, b[i].tensor));
  }

  // The files are what transformers reads: HF names and layouts, format=pt, config.json fields.
  SafetensorsFile weights = SafetensorsFile::open(dir + "/model.safetensors");
  CHECK(weights.metadata().at("format") == "pt");
  CHECK(weights.has("lm_head.weight") == !tie);
  nlohmann::json config = read_json(dir + "/config.json");
  CHECK(config["model_type"] == type);
  CHECK(config["torch_dtype"] == dtype);
  CHECK(config["tie_word_embeddings"] == tie);
  CHECK(read_hf_config(dir) == saved->shape());
  if (std::string(type) == "gpt2") {
    CHECK(config["architectures"][0] == "GPT2LMHeadModel");
    CHECK(config["n_embd"] == 32);
    // Conv1D: [in, out] on disk, the transpose of the model's W[out, in].
    CHECK(weights.info("transformer.h.0.attn.c_attn.weight").shape == std::vector<int64_t>{32, 96});
    for (const ModelParameter &p : saved->parameters())
      if (p.name == "transformer.h.1.mlp.c_fc.weight")
        CHECK(torch::equal(weights.load(p.name), p.tensor.detach().t().contiguous()));
  } else {
    CHECK(config["hidden_size"] == 32);
    CHECK(config["num_key_value_heads"] == 2);
    CHECK(weights.info("model.layers.0.self_attn.k_proj.weight").shape == std::vector<int64_t>{16, 32});
    CHECK(weights.has("model.layers.0.self_attn.q_proj.bias") == (std::string(type) == "qwen2"));
  }
}

TEST_CASE("model: a checkpoint loads into the column-major views the engine makes", "[model][hf]") {
  std::string dir = test::scratch_dir("hf_into_views");
  auto saved = tiny_model("gpt2", true, 1);
  save_hf_checkpoint(*saved, dir);
  auto loaded = tiny_model("gpt2", true, 2);
  for (ModelParameter &p : loaded->parameters())
    if (p.matrix) p.tensor.set_data(p.tensor.detach().t().contiguous().t());  // column-contiguous storage
  load_hf_checkpoint(*loaded, dir);
  auto a = saved->parameters(), b = loaded->parameters();
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i].tensor, b[i].tensor));
}

TEST_CASE("model: export_dtype float32 of a bfloat16 model writes the fp32 master weights", "[model][hf]") {
  auto fp32 = tiny_model("gpt2", false, 7);           // the master weights
  auto bf16 = tiny_model("gpt2", false, 7, "bfloat16");  // the same values rounded: the working weights
  FlatBuffers flat(fp32->parameters(), fp32->block_names(), /*column_major=*/true);
  const zf_layout &layout = flat.layout();
  torch::Tensor master = torch::zeros({int64_t(layout.numel)});
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    torch::Tensor value = fp32->parameters()[i].tensor.detach();
    // Stored column by column, but for the embedding: a table stored token by token (its rows).
    if ((seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS) && !(seg.flags & ZF_SEGMENT_TRANSPOSED)) value = value.t();
    master.narrow(0, int64_t(seg.offset), int64_t(seg.numel)).copy_(value.contiguous().view(-1));
  }
  std::string expected_dir = test::scratch_dir("hf_export_fp32_reference");
  save_hf_checkpoint(*fp32, expected_dir);
  std::string dir = test::scratch_dir("hf_export_master");
  HfExportOptions options;
  options.dtype = "float32";
  options.master = master;
  options.layout = &layout;
  save_hf_checkpoint(*bf16, dir, options);
  SafetensorsFile expected = SafetensorsFile::open(expected_dir + "/model.safetensors");
  SafetensorsFile written = SafetensorsFile::open(dir + "/model.safetensors");
  REQUIRE(written.names() == expected.names());
  for (const std::string &name : expected.names()) {
    INFO(name);
    CHECK(torch::equal(written.load(name), expected.load(name)));
  }
  CHECK(read_json(dir + "/config.json")["torch_dtype"] == "float32");

  // bfloat16 from a float32 model rounds; float32 from bf16 without the master is refused.
  options = HfExportOptions{};
  options.dtype = "bfloat16";
  save_hf_checkpoint(*fp32, dir, options);
  CHECK(SafetensorsFile::open(dir + "/model.safetensors").load("transformer.wte.weight").scalar_type() ==
        torch::kBFloat16);
  options.dtype = "float32";
  CHECK_THROWS_WITH(save_hf_checkpoint(*bf16, dir, options), Catch::Contains("fp32 master weights"));
}

TEST_CASE("model: init_from loads a checkpoint and refuses shapes that contradict its config.json", "[model][hf]") {
  std::string dir = test::scratch_dir("hf_init_from");
  auto saved = tiny_model("qwen2", true, 5);
  save_hf_checkpoint(*saved, dir);
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "m.toml"));
  CHECK(model->name() == "qwen2");
  Batch batch = next_token_batch(torch::randint(61, {2, 8}, torch::kLong));
  CHECK(torch::equal(run_blocks(*model, batch), run_blocks(*saved, batch)));

  CHECK_THROWS_WITH(make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\nhidden = 64\n", "m.toml")),
                    Catch::Contains("m.toml:3:10") && Catch::Contains("hidden = 64") && Catch::Contains("32"));
  CHECK_THROWS_WITH(make_model(RunConfig::parse("[model]\ntype = \"llama\"\ninit_from = \"" + dir + "\"\n", "m.toml")),
                    Catch::Contains("m.toml:2:8") && Catch::Contains("qwen2"));
  // A preset must agree with config.json (the context length of a RoPE model aside).
  CHECK_THROWS_WITH(make_model(RunConfig::parse("[model]\npreset = \"qwen2.5-0.5b\"\ninit_from = \"" + dir + "\"\n",
                                             "m.toml")),
                    Catch::Contains("m.toml:2:10") && Catch::Contains("does not match the shape"));
  CHECK_THROWS_WITH(make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "/nowhere\"\n", "m.toml")),
                    Catch::Contains("nowhere/config.json"));

  // A tensor missing from the weights is named.
  std::string broken = test::scratch_dir("hf_init_from_missing");
  std::filesystem::copy_file(dir + "/config.json", broken + "/config.json");
  SafetensorsFile full = SafetensorsFile::open(dir + "/model.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> some;
  for (const std::string &name : full.names())
    if (name != "model.layers.1.mlp.up_proj.weight") some.emplace_back(name, full.load(name));
  write_safetensors(broken + "/model.safetensors", some);
  auto target = tiny_model("qwen2", true, 6);
  CHECK_THROWS_WITH(load_hf_checkpoint(*target, broken), Catch::Contains("model.layers.1.mlp.up_proj.weight"));
  CHECK_THROWS_WITH(load_hf_checkpoint(*tiny_model("llama", true), dir), Catch::Contains("type = llama here, qwen2 in the checkpoint"));

  // Integer weights (they would convert to whole numbers, mostly zeros) and a NaN are named with
  // their file; a fractional count in config.json is not cut to a whole one.
  auto rewritten = [&](const std::string &name, const std::function<at::Tensor(const at::Tensor &)> &change) {
    std::string changed = test::scratch_dir("hf_init_from_" + name);
    std::filesystem::copy_file(dir + "/config.json", changed + "/config.json");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const std::string &tensor : full.names())
      tensors.emplace_back(tensor, tensor == "model.layers.0.mlp.up_proj.weight" ? change(full.load(tensor))
                                                                                 : full.load(tensor));
    write_safetensors(changed + "/model.safetensors", tensors);
    return changed;
  };
  std::string integers = rewritten("int32", [](const at::Tensor &t) { return t.to(at::kInt); });
  CHECK_THROWS_WITH(load_hf_checkpoint(*target, integers),
                    Catch::Contains(integers + "/model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' holds "
                                    "I32 values; weights must be floating point"));
  std::string nan = rewritten("nan", [](const at::Tensor &t) {
    at::Tensor out = t.clone();
    out[3].fill_(NAN);  // row 3: elements 96 to 127
    return out;
  });
  CHECK_THROWS_WITH(load_hf_checkpoint(*target, nan),
                    Catch::Contains(nan + "/model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight' holds a "
                                    "value that is not finite (nan at element 96)"));
  nlohmann::json config = read_json(dir + "/config.json");
  config["hidden_size"] = 32.5;
  std::ofstream(integers + "/config.json") << config.dump();
  CHECK_THROWS_WITH(read_hf_config(integers), Catch::Contains("\"hidden_size\" = 32.5 must be a whole number"));
}

// Fixtures made by transformers (tests/fixtures/hf/NAME): config.json, model.safetensors and
// expected.safetensors with input_ids [2, 16], logits [2, 16, V] and loss (labels = input_ids).
TEST_CASE("model: logits and loss match transformers on the fixtures", "[model][hf][parity]") {
  std::string name = GENERATE("gpt2", "llama", "qwen2");
  std::string dir = test::source_dir() + "/tests/fixtures/hf/" + name;
  if (!std::filesystem::exists(dir + "/expected.safetensors")) {
    WARN("parity with transformers NOT checked for " << name << ": " << dir
                                                     << "/expected.safetensors is missing (see tests/fixtures/hf)");
    return;
  }
  INFO(name);
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "parity.toml"));
  model->train(false);
  CHECK(model->name() == name);
  SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  torch::Tensor ids = expected.load("input_ids");
  Batch batch = next_token_batch(ids);  // HF shifts labels = input_ids inside; we give explicit targets
  torch::NoGradGuard no_grad;
  torch::Tensor logits = run_blocks(*model, batch);
  torch::Tensor reference = expected.load("logits");
  REQUIRE(logits.sizes() == reference.sizes());
  double logits_diff = (logits - reference).abs().max().item<double>();
  double loss_diff = std::abs(model->loss(logits, batch).item<double>() - expected.load("loss").item<double>());
  INFO("max |logits - transformers| = " << logits_diff << ", |loss - transformers| = " << loss_diff);
  CHECK(logits_diff < 1e-4);
  CHECK(loss_diff < 1e-5);
}

TEST_CASE("model: a config.json dropout that the run does not use is said, once", "[model][hf]") {
  // The fixture's config.json has resid/embd/attn_pdrop = 0.1; Hugging Face would train with it.
  std::string dir = test::scratch_dir("hf_dropout"), config = dir + "/train.toml";
  std::ofstream(config) << "[model]\ninit_from = \"" << test::source_dir()
                        << "/tests/fixtures/hf/gpt2_tokenizer\"\n[data]\ntype = \"synthetic\"\nvocab = 600\n"
                           "seq_len = 16\n[train]\nsteps = 1\nmicro_batch = 2\n[run]\nprogress = \"off\"\n";
  auto run = [&](const std::string &extra) {
    return test::run_command(test::zfcore() + " run " + config + " --set run.output_dir=" + dir + "/out " + extra);
  };
  test::Outcome silent = run("");
  INFO(silent.output);
  REQUIRE(silent.exit_code == 0);
  const std::string said = "config.json has dropout 0.1; this run trains without dropout (model.dropout = 0)";
  CHECK(silent.output.find(said) != std::string::npos);
  CHECK(silent.output.find(said) == silent.output.rfind(said));
  test::Outcome chosen = run("--set model.dropout=0.1");
  INFO(chosen.output);
  REQUIRE(chosen.exit_code == 0);
  CHECK(chosen.output.find("has dropout") == std::string::npos);
}
