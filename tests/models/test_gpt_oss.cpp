// gpt-oss (core/model/families/gpt_oss.cpp) beyond the families' parity test: its fused experts against
// a reference that routes token by token as transformers' GptOssMLP does (top k of the logits, a
// softmax over those k, the clamped SwiGLU with biases); its MXFP4 experts dequantised at load to the
// values transformers' own dequantisation gives (tests/fixtures/gpt_oss_mxfp4, from
// tools/make_family_fixtures.py), and a hand-computed case; its presets' parameter counts.
#include "config/config.hpp"
#include "model/activation_estimate.hpp"
#include "model/attention.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/moe.hpp"
#include "model/mxfp4.hpp"
#include "model/zoo.hpp"
#include "params/flat_buffers.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <map>

using namespace zf;

namespace {

struct Fused {
  MoeSpec spec;
  MoeWeights w;
  std::vector<torch::Tensor> all() const {
    return {w.router, w.router_bias, w.gate_up, w.gate_up_bias, w.fused_down, w.down_bias};
  }
};

Fused random_fused(int64_t experts, int64_t k, int64_t h, int64_t inner) {
  Fused x;
  x.spec.experts = experts;
  x.spec.top_k = k;
  x.spec.expert_intermediate = inner;
  x.spec.norm_topk = true;
  x.spec.swiglu_alpha = 1.702;
  x.spec.swiglu_limit = 1.0;  // below the values reached: the clamp matters
  auto param = [](std::vector<int64_t> sizes, double std) { return (torch::randn(sizes) * std).requires_grad_(); };
  x.w.router = param({experts, h}, 0.5);
  x.w.router_bias = param({experts}, 0.3);
  x.w.gate_up = param({experts, h, 2 * inner}, 0.5);
  x.w.gate_up_bias = param({experts, 2 * inner}, 0.3);
  x.w.fused_down = param({experts, inner, h}, 0.3);
  x.w.down_bias = param({experts, h}, 0.3);
  return x;
}

// Token by token: the top k router logits, a softmax over them, each chosen expert's clamped SwiGLU.
torch::Tensor reference(const Fused &x, const torch::Tensor &input) {
  const double limit = x.spec.swiglu_limit, alpha = x.spec.swiglu_alpha;
  torch::Tensor tokens = input.reshape({-1, input.size(-1)});
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    torch::Tensor token = tokens[t];
    auto [top, picks] = (torch::mv(x.w.router, token) + x.w.router_bias).topk(x.spec.top_k);
    torch::Tensor weights = torch::softmax(top, 0);
    torch::Tensor sum = torch::zeros_like(token);
    for (int64_t j = 0; j < x.spec.top_k; ++j) {
      const int64_t e = picks[j].item<int64_t>();
      torch::Tensor both = torch::mv(x.w.gate_up[e].t(), token) + x.w.gate_up_bias[e];
      std::vector<torch::Tensor> gate_up = both.view({-1, 2}).unbind(1);  // interleaved: gate, up, gate, up, ...
      torch::Tensor gate = torch::minimum(gate_up[0], torch::full_like(gate_up[0], limit));
      torch::Tensor up = torch::clamp(gate_up[1], -limit, limit);
      torch::Tensor hidden = (up + 1) * gate * torch::sigmoid(alpha * gate);
      sum = sum + weights[j] * (torch::mv(x.w.fused_down[e].t(), hidden) + x.w.down_bias[e]);
    }
    rows.push_back(sum);
  }
  return torch::stack(rows).view(input.sizes());
}

std::string fixture(const std::string &name) { return test::source_dir() + "/tests/fixtures/" + name; }

std::map<std::string, torch::Tensor> parameters_of(const std::string &dir, const std::string &dtype) {
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\ndtype = \"" + dtype + "\"\n",
                                           "gpt_oss.toml"));
  std::map<std::string, torch::Tensor> values;
  for (const ModelParameter &p : model->parameters()) values[p.name] = p.tensor.detach().clone();
  return values;
}

}  // namespace

TEST_CASE("gpt-oss: fused experts by grouped GEMMs and by a loop compute transformers' routing token by token",
          "[model][moe]") {
  torch::manual_seed(11);
  Fused x = random_fused(8, 2, 16, 16);
  torch::Tensor input = torch::randn({3, 7, 16}).requires_grad_();
  torch::Tensor seed = torch::randn({3, 7, 16});
  std::vector<torch::Tensor> inputs = x.all();
  inputs.push_back(input);
  torch::Tensor want = reference(x, input);
  std::vector<torch::Tensor> want_grads = torch::autograd::grad({want}, inputs, {seed}, false, false, true);
  for (bool grouped : {false, true}) {
    INFO("grouped " << grouped);
    torch::Tensor got = moe_mlp(x.spec, x.w, input, nullptr, 0, grouped);
    CHECK((got - want).abs().max().item<double>() < 1e-5);
    std::vector<torch::Tensor> got_grads = torch::autograd::grad({got}, inputs, {seed}, false, false, true);
    for (size_t i = 0; i < want_grads.size(); ++i) {
      INFO("tensor " << i);
      REQUIRE(got_grads[i].defined());
      const torch::Tensor want_grad = want_grads[i].defined() ? want_grads[i] : torch::zeros_like(got_grads[i]);
      CHECK((got_grads[i] - want_grad).abs().max().item<double>() < 1e-5);
    }
  }
}

TEST_CASE("gpt-oss: MXFP4 values are E2M1 nibbles, the low one first, times 2^(scale - 127)", "[model][moe]") {
  // One row of one group: bytes 0x21 (0.5, then 1.0), 0xF9 (-0.5, then -6), the rest 0; scale 2^1.
  torch::Tensor blocks = torch::zeros({1, 1, 1, 16}, torch::kUInt8);
  blocks[0][0][0][0] = 0x21;
  blocks[0][0][0][1] = 0xF9;
  torch::Tensor scales = torch::full({1, 1, 1}, 128, torch::kUInt8);
  torch::Tensor values = dequantize_mxfp4(blocks, scales);  // [1, 32, 1]
  REQUIRE(values.sizes() == torch::IntArrayRef({1, 32, 1}));
  torch::Tensor want = torch::zeros({32});
  want[0] = 1.0, want[1] = 2.0, want[2] = -1.0, want[3] = -12.0;
  CHECK(torch::equal(values.view({32}), want));
}

TEST_CASE("gpt-oss: MXFP4 experts load as transformers dequantises them, in fp32 and bf16, the rest unchanged",
          "[model][moe][hf]") {
  SafetensorsFile expected = SafetensorsFile::open(fixture("gpt_oss_mxfp4") + "/expected.safetensors");
  for (const char *dtype : {"float32", "bfloat16"}) {
    INFO(dtype);
    std::map<std::string, torch::Tensor> quantized = parameters_of(fixture("gpt_oss_mxfp4"), dtype);
    std::map<std::string, torch::Tensor> plain = parameters_of(fixture("families/gpt_oss"), dtype);
    REQUIRE(quantized.size() == plain.size());
    size_t dequantized = 0;
    for (const auto &[name, value] : quantized) {
      INFO(name);
      if (expected.has(name)) {
        CHECK(torch::equal(value, expected.load(name).to(value.scalar_type())));
        ++dequantized;
      } else {
        CHECK(torch::equal(value, plain.at(name)));
      }
    }
    CHECK(dequantized == 4);  // gate_up_proj and down_proj of both layers
  }
  // A rank's part of a tensor (ZeRO-3 reads only its shard): a run of elements across two experts' edge.
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + fixture("gpt_oss_mxfp4") + "\"\n", "part.toml"));
  std::unique_ptr<ParameterSource> source = hf_parameter_source(*model, fixture("gpt_oss_mxfp4"));
  const std::vector<ModelParameter> parameters = model->parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (parameters[i].name != "model.layers.1.mlp.experts.down_proj") continue;
    const torch::Tensor whole = expected.load(parameters[i].name).reshape({-1});
    const int64_t per_expert = whole.numel() / 8, begin = 3 * per_expert - 100, count = per_expert + 250;
    torch::Tensor part = torch::empty({count});
    source->fill(i, StoredRegion{false, begin, count, 0, 1}, part);
    CHECK(torch::equal(part, whole.narrow(0, begin, count)));
  }
}

TEST_CASE("gpt-oss: the presets count the parameters transformers builds, and the top 4 experts as active",
          "[model][moe]") {
  // transformers 5.23.0's GptOssForCausalLM of each published config.json on the meta device; active: less
  // the (experts - 4) / experts of the expert tensors (weights and biases) that a token does not use.
  CHECK(preset_parameter_count("gpt-oss-20b") == 20914757184ull);
  CHECK(find_preset("gpt-oss-20b")->active_parameter_count() == 20914757184ull - 19116933120ull / 32 * 28);
  CHECK(preset_parameter_count("gpt-oss-120b") == 116829156672ull);
  CHECK(find_preset("gpt-oss-120b")->active_parameter_count() == 116829156672ull - 114701598720ull / 128 * 124);
}

TEST_CASE("gpt-oss: the memory plan counts the float32 attention scores its sinks keep for the backward",
          "[model][moe]") {
  // Attention with sinks saves its softmax over [T, T + 1] float32 scores per head for the backward (no flash
  // kernel takes sinks): a layer's activations hold at least those, growing with the square of the sequence.
  TransformerOptions options;
  options.shape = *find_preset("gpt-oss-20b");
  options.dtype = "bfloat16";
  for (uint64_t seq : {512ull, 4096ull}) {
    INFO("seq_len " << seq);
    const uint64_t batch = 2, scores = batch * uint64_t(options.shape.heads) * seq * (seq + 1) * 4;
    const ActivationEstimate with = estimate_activations(options, batch * seq, seq);
    CHECK(with.per_layer >= scores);
    CHECK(with.per_layer - estimate_activations(options, batch * seq, 0).per_layer >= scores);
  }
}

TEST_CASE("gpt-oss: gpt-oss-20b's published config.json (MXFP4, rope_scaling) reads as the preset", "[model][moe][hf]") {
  nlohmann::json types = nlohmann::json::array();
  for (int i = 0; i < 24; ++i) types.push_back(i % 2 ? "full_attention" : "sliding_attention");
  const nlohmann::json published = {
      {"architectures", {"GptOssForCausalLM"}}, {"attention_bias", true}, {"attention_dropout", 0.0},
      {"eos_token_id", 200002}, {"experts_per_token", 4}, {"head_dim", 64}, {"hidden_act", "silu"},
      {"hidden_size", 2880}, {"initial_context_length", 4096}, {"initializer_range", 0.02},
      {"intermediate_size", 2880}, {"layer_types", types}, {"max_position_embeddings", 131072},
      {"model_type", "gpt_oss"}, {"num_attention_heads", 64}, {"num_experts_per_tok", 4}, {"num_hidden_layers", 24},
      {"num_key_value_heads", 8}, {"num_local_experts", 32}, {"output_router_logits", false},
      {"pad_token_id", 199999},
      {"quantization_config", {{"modules_to_not_convert", {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                           "model.embed_tokens", "lm_head"}},
                               {"quant_method", "mxfp4"}}},
      {"rms_norm_eps", 1e-05},
      {"rope_scaling", {{"beta_fast", 32.0}, {"beta_slow", 1.0}, {"factor", 32.0},
                        {"original_max_position_embeddings", 4096}, {"rope_type", "yarn"}, {"truncate", false}}},
      {"rope_theta", 150000}, {"router_aux_loss_coef", 0.9}, {"sliding_window", 128}, {"swiglu_limit", 7.0},
      {"tie_word_embeddings", false}, {"use_cache", true}, {"vocab_size", 201088}};
  const TransformerShape shape = shape_from_hf_config(published, "gpt-oss-20b/config.json");
  INFO(shape_difference(shape, *find_preset("gpt-oss-20b"), "published", "preset"));
  CHECK(shape == *find_preset("gpt-oss-20b"));
  CHECK(shape.features.attention_sinks);
  CHECK(shape.features.sliding(0));
  CHECK(!shape.features.sliding(1));
  CHECK(shape.features.rope.type == "yarn");
  CHECK(!shape.features.rope.truncate);
  nlohmann::json other = published;
  other["quantization_config"]["quant_method"] = "gptq";
  CHECK_THROWS_WITH(shape_from_hf_config(other, "gptq/config.json"), Catch::Contains("quantization_config") &&
                                                                        Catch::Contains("mxfp4"));
}

TEST_CASE("gpt-oss: attention with sinks over packed documents is each document's own, window included",
          "[model][moe]") {
  // One row holding documents of 5, 9 and 6 positions: each query sees only its document's keys (within the
  // window), and its head's sink joins its softmax, exactly as when the document runs alone.
  torch::manual_seed(12);
  const int64_t heads = 4, kv_heads = 2, d = 8;
  const std::vector<int64_t> lengths = {5, 9, 6};
  torch::Tensor q = torch::randn({1, heads, 20, d}), k = torch::randn({1, kv_heads, 20, d}),
                v = torch::randn({1, kv_heads, 20, d});
  std::vector<torch::Tensor> positions;
  for (int64_t n : lengths) positions.push_back(torch::arange(n, torch::kLong));
  const PackedDocuments packed = packed_documents(torch::cat(positions).unsqueeze(0));
  for (int64_t window : {0, 4}) {
    INFO("window " << window);
    AttentionOptions options;
    options.sinks = torch::randn({heads});
    options.window = window;
    options.documents = &packed;
    torch::Tensor together = causal_attention(q, k, v, options);
    options.documents = nullptr;
    int64_t start = 0;
    for (int64_t n : lengths) {
      auto part = [&](const torch::Tensor &t) { return t.narrow(2, start, n); };
      torch::Tensor alone = causal_attention(part(q), part(k), part(v), options);
      CHECK((part(together) - alone).abs().max().item<double>() < 1e-6);
      start += n;
    }
    // A sink takes weight: without it the same queries attend otherwise.
    options.documents = &packed;
    options.sinks = torch::Tensor();
    CHECK((causal_attention(q, k, v, options) - together).abs().max().item<double>() > 1e-3);
  }
}

TEST_CASE("gpt-oss: a fused expert tensor is a matrix of each expert's input columns, filled by parts as a whole",
          "[model][moe][shard]") {
  // Stored column by column (ZenFlow's layout), gate_up_proj [E, in, out] is W[out, E x in]: its column
  // e x in + i is expert e's row i, contiguous. Every source (checkpoint, MXFP4, current values) fills any
  // range of the buffers as the whole parameter holds it, in either layout.
  const std::string plain = "[model]\ninit_from = \"" + fixture("families/gpt_oss") + "\"\n";
  const std::string quantized = "[model]\ninit_from = \"" + fixture("gpt_oss_mxfp4") + "\"\n";
  SafetensorsFile dequantized = SafetensorsFile::open(fixture("gpt_oss_mxfp4") + "/expected.safetensors");
  for (bool column_major : {true, false}) {
    for (const std::string &config : {plain, quantized}) {
      INFO("column_major " << column_major << ", " << config);
      auto loaded = make_model(RunConfig::parse(config, "stack.toml"));
      ModelAndValues shapes = make_unallocated_model(RunConfig::parse(config, "stack.toml"));
      FlatBuffers flat(shapes.model->parameters(), shapes.model->block_names(), column_major);
      const uint64_t numel = flat.layout().numel;
      torch::Tensor out = torch::full({int64_t(numel)}, 7.0);
      std::vector<uint64_t> points = {0};
      for (uint64_t at = 997; at < numel; at += 997) points.push_back(at);  // parts cut across rows and experts
      points.push_back(numel);
      for (size_t i = 0; i + 1 < points.size(); ++i)
        flat.fill(*shapes.values, points[i], points[i + 1],
                  out.narrow(0, int64_t(points[i]), int64_t(points[i + 1] - points[i])));
      FlatBuffers whole(loaded->parameters(), loaded->block_names(), column_major);
      torch::Tensor values = torch::zeros({int64_t(numel)});
      whole.fill(*current_values(loaded->parameters()), 0, numel, values);
      CHECK(torch::equal(out, values));
      for (uint32_t s = 0; s < flat.layout().segment_count; ++s) {
        const zf_segment &seg = flat.layout().segments[s];
        if (std::string(seg.name) != "model.layers.1.mlp.experts.gate_up_proj") continue;
        CHECK(bool(seg.flags & ZF_SEGMENT_MATRIX) == column_major);
        if (!column_major) continue;
        CHECK((seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS));
        CHECK(seg.rows == 64);
        CHECK(seg.cols == 8 * 32);
        torch::Tensor stack = config == plain ? loaded->parameters()[0].tensor : dequantized.load(seg.name);
        for (const ModelParameter &p : loaded->parameters())
          if (config == plain && p.name == seg.name) stack = p.tensor.detach();
        const int64_t e = 5, i = 17, column = e * 32 + i;
        CHECK(torch::equal(out.narrow(0, int64_t(seg.offset) + column * 64, 64), stack[e][i]));
      }
    }
  }
}
