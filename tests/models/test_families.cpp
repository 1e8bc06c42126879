// The families of the Llama lineage (core/model/families/) against transformers, on the fixtures of
// tools/make_family_fixtures.py: tiny models with each family's features switched on, evaluated on
// sequences they sampled themselves. Loss within 1e-4 relative, every gradient within 1e-3 of the
// largest; config.json read, written and read again gives the same model.
#include "config/config.hpp"
#include "model/activation_estimate.hpp"
#include "model/family.hpp"
#include "model/gemma4_layout.hpp"
#include "model/rope.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

using namespace zf;
using test::next_token_batch;
using test::run_blocks;

namespace {

const char *const kFixtures[] = {"gemma3", "gemma4", "granite", "llama3",    "ministral3", "mistral", "mixtral", "olmo2",
                                 "olmo3",  "olmoe",   "phi3",      "qwen3",      "qwen3_5", "qwen3_moe", "smollm3",
                                 "qwen3_5_moe", "gpt_oss",
                                 // the image-text checkpoints' language models, run on text (qwen3_5_moe's
                                 // experts stored fused, as its published checkpoints hold them)
                                 "gemma3_image_text", "qwen3_5_image_text", "qwen3_5_moe_image_text", "gemma4_image_text",
                                 "gemma4_moe"};

std::string fixture_dir(const std::string &name) { return test::source_dir() + "/tests/fixtures/families/" + name; }

}  // namespace

TEST_CASE("families: loss and every gradient match transformers on sequences the model wrote", "[model][hf][parity]") {
  const std::string name = GENERATE(from_range(std::begin(kFixtures), std::end(kFixtures)));
  const std::string dir = fixture_dir(name);
  INFO(name);
  REQUIRE(std::filesystem::exists(dir + "/expected.safetensors"));
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "parity.toml"));
  model->train(false);
  SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  Batch batch = next_token_batch(expected.load("input_ids"));
  torch::Tensor logits = run_blocks(*model, batch);
  torch::Tensor reference = expected.load("logits");
  REQUIRE(logits.sizes() == reference.sizes());
  const double logits_diff = (logits.detach() - reference).abs().max().item<double>();
  torch::Tensor loss = model->loss(logits, batch);
  const double want = expected.load("loss").item<double>();
  INFO("loss " << loss.item<double>() << " vs transformers' " << want << ", max |logits diff| " << logits_diff);
  CHECK(std::abs(loss.item<double>() - want) <= 1e-4 * std::abs(want));
  CHECK(logits_diff <= 1e-4 * reference.abs().max().item<double>());
  if (expected.has("aux_loss")) {  // the mixtures of experts: the load-balancing loss, which the loss includes
    const double want_aux = expected.load("aux_loss").item<double>();
    INFO("load-balancing loss " << model->aux_loss() << " vs transformers' " << want_aux);
    CHECK(std::abs(model->aux_loss() - want_aux) <= 1e-5 * std::abs(want_aux));
  }
  loss.backward();
  for (const ModelParameter &p : model->parameters()) {
    INFO(p.name);
    REQUIRE(expected.has("grad." + p.name));
    torch::Tensor want_grad = expected.load("grad." + p.name);
    REQUIRE(p.tensor.grad().defined());
    const double scale = std::max(want_grad.abs().max().item<double>(), 1e-12);
    CHECK((p.tensor.grad() - want_grad).abs().max().item<double>() <= 1e-3 * scale);
  }
}

TEST_CASE("families: a fixture's config.json, written back as an export writes it, reads as the same model",
          "[model][hf]") {
  const std::string name = GENERATE(from_range(std::begin(kFixtures), std::end(kFixtures)));
  INFO(name);
  const TransformerShape shape = read_hf_config(fixture_dir(name));
  const nlohmann::json written = hf_config(shape, "float32", 0);
  const TransformerShape again = shape_from_hf_config(written, name + " (written)");
  INFO(shape_difference(shape, again, "read", "written"));
  CHECK(again == shape);
}

TEST_CASE("families: a model given by type alone has its family's layer, trains, and round-trips its config",
          "[model][hf]") {
  const Family &family = GENERATE(from_range(families()));
  INFO(family.type);
  if (family.image_text()) return;  // read from a checkpoint only (the next test)
  torch::manual_seed(3);
  auto config = RunConfig::parse("[model]\ntype = \"" + family.type + "\"\nhidden = 32\nlayers = 2\nheads = 4\n"
                                 "kv_heads = 2\nvocab = 61\nmax_seq = 64\n", "type.toml");
  const TransformerShape shape = transformer_options(config).shape;
  CHECK(shape.type == family.type);
  CHECK(shape_from_hf_config(hf_config(shape, "float32", 0), "written") == shape);
  auto model = make_model(config);
  CHECK(model->name() == family.type);
  uint64_t numel = 0;
  for (const ModelParameter &p : model->parameters()) numel += uint64_t(p.tensor.numel());
  CHECK(numel == shape.parameter_count());
  torch::manual_seed(4);
  Batch batch = next_token_batch(torch::randint(61, {2, 24}, torch::kLong));
  torch::Tensor loss = model->loss(run_blocks(*model, batch), batch);
  CHECK(std::isfinite(loss.item<double>()));
  CHECK(loss.item<double>() < 1.5 * std::log(61.0));  // near uniform at the start, not diverged
}

TEST_CASE("families: Gemma 4 given by type alone is the model transformers' Gemma4TextConfig defaults build, and "
          "learns", "[model][hf]") {
  // tools/make_family_fixtures.py's type_alone(): the parameters (and the layer scalars, buffers there) that
  // transformers 5.23.0 builds for the config zfcore's keys stand for, per-layer inputs and global heads included.
  const nlohmann::json want =
      read_json_file(test::source_dir() + "/tests/fixtures/gemma4_type_alone/parameters.json", 1 << 20);
  std::string toml = "[model]\ntype = \"gemma4_text\"\n";
  for (const auto &[key, value] : want.at("zfcore").items()) toml += key + " = " + value.dump() + "\n";
  const RunConfig config = RunConfig::parse(toml, "gemma4.toml");
  std::map<std::string, std::vector<int64_t>> expected, built;
  uint64_t expected_numel = 0, numel = 0;
  for (const char *kind : {"parameters", "buffers"})
    for (const auto &[name, shape] : want.at(kind).items()) {
      expected[name] = shape.get<std::vector<int64_t>>();
      expected_numel += uint64_t(c10::multiply_integers(expected[name]));
    }
  torch::manual_seed(3);
  auto model = make_model(config);
  for (const ModelParameter &p : model->parameters()) {
    built[p.name] = p.tensor.sizes().vec();
    numel += uint64_t(p.tensor.numel());
  }
  for (const auto &[name, shape] : expected) {
    INFO(name << " " << c10::IntArrayRef(shape));
    REQUIRE(built.count(name));
    CHECK(built[name] == shape);
  }
  for (const auto &[name, shape] : built) {
    INFO(name);
    CHECK(expected.count(name));
  }
  CHECK(numel == expected_numel);
  const TransformerShape shape = transformer_options(config).shape;
  CHECK(shape.parameter_count() == expected_numel);
  for (int64_t i = 0; i < shape.layers; ++i)
    CHECK(shape.features.sliding(i) == (want.at("layer_types")[size_t(i)] == "sliding_attention"));
  CHECK(shape_from_hf_config(hf_config(shape, "float32", 0), "written") == shape);
  // It learns: a few AdamW steps on one batch lower its loss.
  std::vector<torch::Tensor> tensors;
  for (const ModelParameter &p : model->parameters()) tensors.push_back(p.tensor);
  torch::optim::AdamW adam(tensors, torch::optim::AdamWOptions(3e-3).weight_decay(0));
  Batch batch = next_token_batch(torch::randint(61, {2, 24}, torch::kLong));
  std::vector<double> losses;
  for (int step = 0; step < 6; ++step) {
    adam.zero_grad();
    torch::Tensor loss = model->loss(run_blocks(*model, batch), batch);
    loss.backward();
    adam.step();
    losses.push_back(loss.item<double>());
  }
  INFO("losses " << losses.front() << " ... " << losses.back());
  CHECK(std::isfinite(losses.back()));
  CHECK(losses.back() < losses.front() - 0.1);
}

TEST_CASE("families: an image-text type without a checkpoint is refused, naming its text family", "[model][hf]") {
  for (const char *type : {"gemma3", "qwen3_5", "qwen3_5_moe", "gemma4"}) {
    INFO(type);
    auto config = RunConfig::parse(std::string("[model]\ntype = \"") + type + "\"\nhidden = 32\n", "type.toml");
    CHECK_THROWS_WITH(transformer_options(config),
                      Catch::Contains("type.toml") && Catch::Contains("model.init_from") &&
                          Catch::Contains(std::string("type = \"") + type + "_text\""));
  }
}

TEST_CASE("families: gemma-3-4b-it's config.json reads as transformers' Gemma3TextConfig fills it", "[model][hf]") {
  // The published file: most keys left to the class's defaults, transformers 4's rope_scaling, no layer_types.
  const nlohmann::json config = nlohmann::json::parse(R"({
    "architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3", "mm_tokens_per_image": 256,
    "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                    "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                    "sliding_window": 1024},
    "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                      "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                      "patch_size": 14, "vision_use_head": false}})");
  const TransformerShape s = shape_from_hf_config(config, "gemma-3-4b-it/config.json");
  // transformers 5.23.0's Gemma3ForConditionalGeneration of this file, its language model counted on the meta device.
  CHECK(s.parameter_count() == 3880263168ull);
  CHECK(s.type == "gemma3");
  CHECK((s.heads == 8 && s.kv_heads == 4 && s.head_dim() == 256 && s.vocab == 262208 && s.tie_embeddings));
  std::vector<int64_t> global;
  for (int64_t i = 0; i < s.layers; ++i)
    if (!s.features.sliding(i)) global.push_back(i);
  CHECK(global == std::vector<int64_t>{5, 11, 17, 23, 29});  // transformers' layer_types
  CHECK(s.features.sliding_window == 1024);
  CHECK((s.features.rope.type == "linear" && s.features.rope.factor == 8 && s.rope_theta == 1e6));
  CHECK((s.features.sliding_rope.type == "default" && s.features.sliding_rope.theta == 1e4));
  CHECK(shape_from_hf_config(hf_config(s, "bfloat16", 0), "written") == s);
}

TEST_CASE("families: a config.json zfcore cannot compute is refused, naming the key", "[model][hf]") {
  nlohmann::json config = read_json_file(fixture_dir("llama3") + "/config.json", 1 << 20);
  auto refusal = [&](nlohmann::json changed) {
    try {
      shape_from_hf_config(changed, "x/config.json");
    } catch (const Error &error) {
      return std::string(error.what());
    }
    return std::string("(accepted)");
  };
  nlohmann::json longrope = config;
  longrope["rope_parameters"]["rope_type"] = "longrope";
  CHECK_THAT(refusal(longrope), Catch::Contains("x/config.json") && Catch::Contains("\"longrope\"") &&
                                    Catch::Contains("default, linear, llama3, yarn and proportional"));
  nlohmann::json delta = config;
  delta["layer_types"] = {"linear_attention", "full_attention"};
  CHECK_THAT(refusal(delta), Catch::Contains("\"linear_attention\""));
  nlohmann::json unknown = config;
  unknown["model_type"] = "qwen3_next";
  CHECK_THAT(refusal(unknown), Catch::Contains("model_type \"qwen3_next\"") && Catch::Contains("qwen3_5_text"));
  nlohmann::json activation = config;
  activation["hidden_act"] = "relu2";
  CHECK_THAT(refusal(activation), Catch::Contains("\"relu2\""));
  // Qwen3.5's keys: an attention without its output gate is another model; M-RoPE sections must be counts.
  nlohmann::json qwen = read_json_file(fixture_dir("qwen3_5_image_text") + "/config.json", 1 << 20);
  CHECK(refusal(qwen) == "(accepted)");
  nlohmann::json ungated = qwen;
  ungated["text_config"]["attn_output_gate"] = false;
  CHECK_THAT(refusal(ungated), Catch::Contains("x/config.json (text_config)") && Catch::Contains("\"attn_output_gate\""));
  nlohmann::json sections = qwen;
  sections["text_config"]["rope_parameters"]["mrope_section"] = {11, "eleven", 10};
  CHECK_THAT(refusal(sections), Catch::Contains("mrope_section") && Catch::Contains("\"eleven\""));
  nlohmann::json mtp = qwen;
  mtp["text_config"]["mtp_num_hidden_layers"] = -1;
  CHECK_THAT(refusal(mtp), Catch::Contains("mtp_num_hidden_layers = -1"));
  nlohmann::json other = qwen;
  other["text_config"]["model_type"] = "qwen3";
  CHECK_THAT(refusal(other), Catch::Contains("text_config has model_type \"qwen3\"") && Catch::Contains("qwen3_5_text"));
  nlohmann::json flat = qwen;
  flat.erase("text_config");
  CHECK_THAT(refusal(flat), Catch::Contains("no text_config"));
}

TEST_CASE("families: the Qwen3.5 presets count the parameters transformers builds for their text model", "[model]") {
  // transformers 5.23.0's Qwen3_5ForCausalLM of each published text_config, counted on the meta device.
  CHECK(preset_parameter_count("qwen3.5-9b") == 8953803264ull);
  CHECK(preset_parameter_count("qwen3.5-27b") == 26895998464ull);
  const TransformerShape shape = *find_preset("qwen3.5-27b");
  int64_t linear = 0;
  for (int64_t i = 0; i < shape.layers; ++i) linear += shape.features.linear(i);
  CHECK(linear == 48);  // three of every four layers
  CHECK(shape.features.partial_rotary == 0.25);
}

TEST_CASE("families: Gemma 4 E2B's preset has transformers' parameters and its layers' shapes", "[model]") {
  // transformers 5.23.0's Gemma4ForCausalLM of E2B's text_config counts 4628569344 parameters on the meta
  // device; zfcore holds its 35 layer scalars (buffers there) as parameters that never change.
  CHECK(preset_parameter_count("gemma4-e2b") == 4628569344ull + 35);
  const TransformerShape s = *find_preset("gemma4-e2b");
  CHECK((gemma4_head_dim(s, 3) == 256 && gemma4_head_dim(s, 4) == 512 && gemma4_kv_heads(s, 4) == 1));
  CHECK((gemma4_first_shared(s) == 15 && gemma4_kv_source(s, 14) == 14));
  CHECK((gemma4_kv_source(s, 15) == 13 && gemma4_kv_source(s, 19) == 14 && gemma4_kv_source(s, 34) == 14));
  CHECK((gemma4_mlp_width(s, 14) == 6144 && gemma4_mlp_width(s, 15) == 12288));
  CHECK((s.features.rope.type == "proportional" && s.features.rope.partial == 0.25 && s.rope_theta == 1e6));
  // What passes between blocks: hidden 1536, 35 per-layer inputs of 256, the keys and values of layer 13
  // (one head of 256) and 14 (one of 512); a checkpointed layer keeps that much of each token.
  CHECK(gemma4_stream_width(s) == 1536 + 35 * 256 + 2 * 256 + 2 * 512);
  TransformerOptions options;
  options.shape = s;
  options.dtype = "bfloat16";
  options.activation_checkpointing = true;
  CHECK(estimate_activations(options, 4096).per_layer == 2ull * 12032 * 4096);
  CHECK(shape_from_hf_config(hf_config(s, "bfloat16", 0), "written") == s);
}

TEST_CASE("families: gemma-4-E2B's image-text config.json reads as its language model, the preset's shape",
          "[model][hf]") {
  // The published file's text_config (layer_types as written there: every fifth layer global), nulls included.
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 35; ++i) types.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  const nlohmann::json config = {
      {"architectures", {"Gemma4ForConditionalGeneration"}}, {"model_type", "gemma4"}, {"tie_word_embeddings", true},
      {"text_config", {{"model_type", "gemma4_text"}, {"hidden_size", 1536}, {"num_hidden_layers", 35},
                       {"num_attention_heads", 8}, {"num_key_value_heads", 1}, {"head_dim", 256},
                       {"global_head_dim", 512}, {"num_global_key_value_heads", nullptr}, {"attention_k_eq_v", false},
                       {"sliding_window", 512}, {"vocab_size", 262144}, {"vocab_size_per_layer_input", 262144},
                       {"hidden_size_per_layer_input", 256}, {"num_kv_shared_layers", 20},
                       {"use_double_wide_mlp", true}, {"intermediate_size", 6144}, {"max_position_embeddings", 131072},
                       {"rms_norm_eps", 1e-6}, {"hidden_activation", "gelu_pytorch_tanh"},
                       {"final_logit_softcapping", 30.0}, {"use_bidirectional_attention", "vision"},
                       {"enable_moe_block", false}, {"layer_types", types},
                       {"rope_parameters", {{"full_attention", {{"partial_rotary_factor", 0.25}, {"rope_theta", 1e6},
                                                                {"rope_type", "proportional"}}},
                                            {"sliding_attention", {{"rope_theta", 1e4}, {"rope_type", "default"}}}}}}},
      {"vision_config", {{"model_type", "gemma4_vision"}, {"hidden_size", 768}}}};
  const TransformerShape s = shape_from_hf_config(config, "gemma-4-E2B-it/config.json");
  CHECK(s.type == "gemma4");
  TransformerShape text = s;
  text.type = "gemma4_text";
  const TransformerShape preset = *find_preset("gemma4-e2b");
  INFO(shape_difference(text, preset, "read", "preset"));
  CHECK(text == preset);
  CHECK(shape_from_hf_config(hf_config(s, "bfloat16", 0), "written") == s);
}

TEST_CASE("families: Gemma 4 26B-A4B's preset has transformers' parameters, 8 of 128 experts active", "[model]") {
  // transformers 5.23.0's Gemma4ForCausalLM of 26B-A4B's text_config, on the meta device: 25233141760, and
  // zfcore's 30 fixed layer scalars.
  CHECK(preset_parameter_count("gemma4-26b-a4b") == 25233141760ull + 30);
  const TransformerShape s = *find_preset("gemma4-26b-a4b");
  const uint64_t experts = 30ull * 128 * 3 * 2816 * 704;
  CHECK(s.active_parameter_count() == s.parameter_count() - experts + experts / 16);  // 8 of 128 compute
  CHECK((gemma4_head_dim(s, 5) == 512 && gemma4_kv_heads(s, 5) == 2 && gemma4_values_are_keys(s, 5)));
  CHECK((gemma4_kv_heads(s, 4) == 8 && !gemma4_values_are_keys(s, 4) && s.features.gemma4.per_layer_hidden == 0));
  CHECK(shape_from_hf_config(hf_config(s, "bfloat16", 0), "written") == s);
  // zfcore estimate says so too.
  const test::Outcome estimate = test::run_command(test::zfcore() + " estimate " + test::source_dir() +
                                                   "/examples/gpu/qwen2-1.5b-bench.toml --set model.preset=gemma4-26b-a4b");
  INFO(estimate.output);
  CHECK_THAT(estimate.output, Catch::Contains("active per token (8 of 128 experts)"));
}

TEST_CASE("families: a Gemma 4 config.json zfcore cannot compute is refused, naming the key", "[model][hf]") {
  const nlohmann::json config = read_json_file(fixture_dir("gemma4") + "/config.json", 1 << 20);
  auto refusal = [&](const char *key, nlohmann::json value) {
    nlohmann::json changed = config;
    changed[key] = value;
    try {
      shape_from_hf_config(changed, "g/config.json");
    } catch (const Error &error) {
      return std::string(error.what());
    }
    return std::string("(accepted)");
  };
  CHECK_THAT(refusal("enable_moe_block", true), Catch::Contains("g/config.json") && Catch::Contains("\"num_experts\""));
  CHECK_THAT(refusal("top_k_experts", 9), Catch::Contains("(accepted)"));  // read only with enable_moe_block
  CHECK_THAT(refusal("use_bidirectional_attention", "all"), Catch::Contains("\"use_bidirectional_attention\""));
  CHECK_THAT(refusal("per_layer_config", {{"1", {{"head_dim", 32}, {"intermediate_size", 8}}}, {"4", {{"head_dim", 32}}}}),
             Catch::Contains("per_layer_config.1") && Catch::Contains("\"intermediate_size\""));
  CHECK_THAT(refusal("per_layer_config", {{"1", {{"head_dim", 32}}}, {"4", {{"head_dim", 64}}}}),
             Catch::Contains("layer 4") && Catch::Contains("layer 1"));
  CHECK_THAT(refusal("num_kv_shared_layers", 5), Catch::Contains("num_kv_shared_layers = 5"));
  CHECK(refusal("num_kv_shared_layers", 2) == "(accepted)");
}

TEST_CASE("families: proportional RoPE turns the first pairs of the whole head at its own rate, the rest not at all",
          "[model]") {
  // transformers 5.23.0's _compute_proportional_rope_parameters for head_dim 32, partial_rotary_factor 0.25,
  // rope_theta 1e4, factor 2 (which Gemma 4's fixture leaves at 1).
  RopeSpec spec;
  spec.type = "proportional";
  spec.theta = 1e4;
  spec.partial = 0.25;
  spec.factor = 2;
  const torch::Tensor inverse = rope_inverse_frequencies(spec, 32, 64).first;
  const std::vector<float> want = {0.5f, 0.28117066621780396f, 0.15811388194561005f, 0.08891396969556808f};
  REQUIRE(inverse.size(0) == 16);
  for (int64_t i = 0; i < 16; ++i) CHECK(inverse[i].item<float>() == (i < 4 ? want[size_t(i)] : 0.f));
}
