// The published shapes as presets: GPT-2's, and for the other families the size keys of each model's
// config.json on the Hugging Face hub, read through the same code as a checkpoint's config.json, so a
// preset has exactly the features (RoPE scaling, windows, norms) a download of that model would.
#include "model/transformer_shape.hpp"

#include "runtime/error.hpp"

#include <nlohmann/json.hpp>

#include <map>

namespace zf {
namespace {

using json = nlohmann::json;

TransformerShape gpt2_preset(int64_t hidden, int64_t layers, int64_t heads) {
  TransformerShape s;
  s.type = "gpt2";
  s.hidden = hidden;
  s.layers = layers;
  s.heads = s.kv_heads = heads;
  s.intermediate = 4 * hidden;
  s.vocab = 50257;
  s.max_seq = 1024;
  s.norm_eps = 1e-5;
  s.tie_embeddings = true;
  s.qkv_bias = true;
  return s;
}

// config.json's keys of a decoder: model_type, hidden, intermediate, layers, heads, kv_heads, vocab,
// context, RoPE base, rms_norm_eps, tied head; `extra` adds the family's own keys.
json config(const char *type, int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads, int64_t kv_heads,
            int64_t vocab, int64_t max_seq, double theta, double eps, bool tie, json extra = json::object()) {
  json c = {{"model_type", type},          {"hidden_size", hidden}, {"intermediate_size", intermediate},
            {"num_hidden_layers", layers}, {"num_attention_heads", heads}, {"num_key_value_heads", kv_heads},
            {"vocab_size", vocab},         {"max_position_embeddings", max_seq}, {"rope_theta", theta},
            {"rms_norm_eps", eps},         {"tie_word_embeddings", tie}};
  c.update(extra);
  return c;
}

json llama3_rope(double factor) {
  return {{"rope_parameters", {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", factor},
                               {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 8192}}}};
}

// gpt-oss: 64-wide heads, sliding (128) and full layers alternating, YaRN from 4096 positions x 32,
// `experts` experts of width 2880, 4 per token.
json gpt_oss_layers(int64_t layers, int64_t experts) {
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i) types.push_back(i % 2 ? "full_attention" : "sliding_attention");
  return {{"layer_types", types}, {"sliding_window", 128}, {"head_dim", 64}, {"num_local_experts", experts},
          {"num_experts_per_tok", 4}, {"attention_bias", true}, {"router_aux_loss_coef", 0.9},
          {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                            {"original_max_position_embeddings", 4096}, {"truncate", false}}}};
}

// Gemma 3: five local layers of `window` tokens (base 10000) to one global layer (base 1e6, `global_rope`).
// Gemma 4 E2B's own keys (its published text_config).
json gemma4_e2b() {
  json types = json::array();
  for (int64_t i = 0; i < 35; ++i) types.push_back(i % 5 == 4 ? "full_attention" : "sliding_attention");
  return {{"layer_types", types}, {"sliding_window", 512}, {"hidden_activation", "gelu_pytorch_tanh"},
          {"head_dim", 256}, {"global_head_dim", 512}, {"attention_k_eq_v", false}, {"num_kv_shared_layers", 20},
          {"hidden_size_per_layer_input", 256}, {"vocab_size_per_layer_input", 262144},
          {"use_double_wide_mlp", true}, {"final_logit_softcapping", 30.0},
          {"rope_parameters", {{"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25},
                                                   {"rope_theta", 1e6}}},
                               {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}}}};
}

// Gemma 4 26B-A4B's own keys (its published text_config).
json gemma4_26b() {
  json c = gemma4_e2b();
  json types = json::array();
  for (int64_t i = 0; i < 30; ++i) types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  c.update({{"layer_types", types}, {"sliding_window", 1024}, {"num_global_key_value_heads", 2},
            {"attention_k_eq_v", true}, {"num_kv_shared_layers", 0}, {"hidden_size_per_layer_input", 0},
            {"use_double_wide_mlp", false}, {"enable_moe_block", true}, {"num_experts", 128},
            {"top_k_experts", 8}, {"moe_intermediate_size", 704}});
  return c;
}

json gemma3_layers(int64_t layers, int64_t window, int64_t head_dim, int64_t query_scalar, json global_rope) {
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  global_rope["rope_theta"] = 1e6;
  return {{"layer_types", types}, {"sliding_window", window}, {"hidden_activation", "gelu_pytorch_tanh"},
          {"head_dim", head_dim}, {"query_pre_attn_scalar", query_scalar},
          {"rope_parameters", {{"full_attention", global_rope},
                               {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}}}};
}

json olmo3_layers(int64_t layers) {
  json types = json::array();
  for (int64_t i = 0; i < layers; ++i) types.push_back((i + 1) % 4 ? "sliding_attention" : "full_attention");
  return {{"layer_types", types}, {"sliding_window", 4096}};
}

// Qwen3.5 dense: Gated DeltaNet layers (16 key heads, `value_heads` value heads, 128 wide, kernel 4),
// every fourth layer full attention with head_dim 256, a quarter of it rotated.
json qwen3_5_layers(int64_t value_heads) {
  return {{"head_dim", 256},
          {"linear_num_key_heads", 16},
          {"linear_num_value_heads", value_heads},
          {"linear_key_head_dim", 128},
          {"linear_value_head_dim", 128},
          {"linear_conv_kernel_dim", 4},
          {"full_attention_interval", 4},
          {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}}};
}

// Qwen3.5-MoE: the Qwen3.5 layers of its 35B-A3B (16 key heads, 32 value heads), experts in every layer.
json qwen3_5_moe_layers() {
  json c = qwen3_5_layers(32);
  c.update({{"num_experts", 256}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 512},
            {"shared_expert_intermediate_size", 512}});
  return c;
}

const std::map<std::string, TransformerShape> &presets() {
  static const std::map<std::string, TransformerShape> table = [] {
    std::map<std::string, TransformerShape> t = {
        {"gpt2", gpt2_preset(768, 12, 12)},
        {"gpt2-medium", gpt2_preset(1024, 24, 16)},
        {"gpt2-large", gpt2_preset(1280, 36, 20)},
        {"gpt2-xl", gpt2_preset(1600, 48, 25)},
    };
    const std::map<std::string, json> configs = {
        {"llama2-7b", config("llama", 4096, 11008, 32, 32, 32, 32000, 4096, 1e4, 1e-5, false)},
        {"llama2-13b", config("llama", 5120, 13824, 40, 40, 40, 32000, 4096, 1e4, 1e-5, false)},
        {"llama2-70b", config("llama", 8192, 28672, 80, 64, 8, 32000, 4096, 1e4, 1e-5, false)},
        {"llama3.1-8b", config("llama", 4096, 14336, 32, 32, 8, 128256, 131072, 5e5, 1e-5, false, llama3_rope(8))},
        {"llama3.2-1b", config("llama", 2048, 8192, 16, 32, 8, 128256, 131072, 5e5, 1e-5, true, llama3_rope(32))},
        {"llama3.2-3b", config("llama", 3072, 8192, 28, 24, 8, 128256, 131072, 5e5, 1e-5, true, llama3_rope(32))},
        {"llama3.3-70b", config("llama", 8192, 28672, 80, 64, 8, 128256, 131072, 5e5, 1e-5, false, llama3_rope(8))},
        {"qwen2-1.5b", config("qwen2", 1536, 8960, 28, 12, 2, 151936, 131072, 1e6, 1e-6, true)},
        {"qwen2.5-0.5b", config("qwen2", 896, 4864, 24, 14, 2, 151936, 32768, 1e6, 1e-6, true)},
        {"qwen2.5-1.5b", config("qwen2", 1536, 8960, 28, 12, 2, 151936, 131072, 1e6, 1e-6, true)},
        {"qwen2.5-3b", config("qwen2", 2048, 11008, 36, 16, 2, 151936, 32768, 1e6, 1e-6, true)},
        {"qwen2.5-7b", config("qwen2", 3584, 18944, 28, 28, 4, 152064, 131072, 1e6, 1e-6, false)},
        {"qwen2.5-14b", config("qwen2", 5120, 13824, 48, 40, 8, 152064, 131072, 1e6, 1e-5, false)},
        {"qwen2.5-32b", config("qwen2", 5120, 27648, 64, 40, 8, 152064, 131072, 1e6, 1e-5, false)},
        {"qwen3-0.6b", config("qwen3", 1024, 3072, 28, 16, 8, 151936, 40960, 1e6, 1e-6, true, {{"head_dim", 128}})},
        {"qwen3-1.7b", config("qwen3", 2048, 6144, 28, 16, 8, 151936, 40960, 1e6, 1e-6, true, {{"head_dim", 128}})},
        {"qwen3-4b", config("qwen3", 2560, 9728, 36, 32, 8, 151936, 40960, 1e6, 1e-6, true, {{"head_dim", 128}})},
        {"qwen3-8b", config("qwen3", 4096, 12288, 36, 32, 8, 151936, 40960, 1e6, 1e-6, false, {{"head_dim", 128}})},
        {"qwen3-14b", config("qwen3", 5120, 17408, 40, 40, 8, 151936, 40960, 1e6, 1e-6, false, {{"head_dim", 128}})},
        {"qwen3-32b", config("qwen3", 5120, 25600, 64, 64, 8, 151936, 40960, 1e6, 1e-6, false, {{"head_dim", 128}})},
        {"qwen3.5-9b", config("qwen3_5_text", 4096, 12288, 32, 16, 4, 248320, 262144, 1e7, 1e-6, false,
                              qwen3_5_layers(32))},
        {"qwen3.5-27b", config("qwen3_5_text", 5120, 17408, 64, 24, 4, 248320, 262144, 1e7, 1e-6, false,
                               qwen3_5_layers(48))},
        {"mistral-small-24b",
         config("mistral", 5120, 32768, 40, 32, 8, 131072, 32768, 1e8, 1e-5, false, {{"head_dim", 128}})},
        {"phi-4", config("phi3", 5120, 17920, 40, 40, 10, 100352, 16384, 250000, 1e-5, false)},
        {"olmo2-7b", config("olmo2", 4096, 11008, 32, 32, 32, 100352, 4096, 5e5, 1e-6, false)},
        {"olmo3-7b", config("olmo3", 4096, 11008, 32, 32, 32, 100278, 65536, 5e5, 1e-6, false, olmo3_layers(32))},
        {"olmo3-32b", config("olmo3", 5120, 27648, 64, 40, 8, 100278, 65536, 5e5, 1e-6, false, olmo3_layers(64))},
        {"gemma3-1b", config("gemma3_text", 1152, 6912, 26, 4, 1, 262144, 32768, 1e6, 1e-6, true,
                             gemma3_layers(26, 512, 256, 256, {{"rope_type", "default"}}))},
        {"gemma3-4b", config("gemma3_text", 2560, 10240, 34, 8, 4, 262208, 131072, 1e6, 1e-6, true,
                             gemma3_layers(34, 1024, 256, 256, {{"rope_type", "linear"}, {"factor", 8.0}}))},
        {"gemma3-12b", config("gemma3_text", 3840, 15360, 48, 16, 8, 262208, 131072, 1e6, 1e-6, true,
                              gemma3_layers(48, 1024, 256, 256, {{"rope_type", "linear"}, {"factor", 8.0}}))},
        {"gemma3-27b", config("gemma3_text", 5376, 21504, 62, 32, 16, 262208, 131072, 1e6, 1e-6, true,
                              gemma3_layers(62, 1024, 128, 168, {{"rope_type", "linear"}, {"factor", 8.0}}))},
        // Gemma 4 E2B's language model (gemma-4-E2B's text_config): four local layers of 512 tokens to one global
        // one (head size 512, proportional RoPE), the last 20 layers reusing keys and values with double-wide MLPs,
        // per-layer input embeddings of 256 channels a layer.
        {"gemma4-e2b", config("gemma4_text", 1536, 6144, 35, 8, 1, 262144, 131072, 1e6, 1e-6, true, gemma4_e2b())},
        // Gemma 4 26B-A4B's language model: five local layers of 1024 tokens to one global (K = V, 2 key-value
        // heads of 512), 128 experts of width 704 beside each MLP, 8 a token.
        {"gemma4-26b-a4b", config("gemma4_text", 2816, 2112, 30, 16, 8, 262144, 262144, 1e6, 1e-6, true, gemma4_26b())},
        // Mixtures of experts (moe.hpp): every expert's parameters are held and updated, the top k compute.
        {"qwen3-30b-a3b", config("qwen3_moe", 2048, 6144, 48, 32, 4, 151936, 40960, 1e6, 1e-6, false,
                                 {{"head_dim", 128}, {"num_experts", 128}, {"num_experts_per_tok", 8},
                                  {"moe_intermediate_size", 768}, {"norm_topk_prob", true}})},
        // Qwen3.5-35B-A3B (and Qwen3.6-35B-A3B, the same shape): Qwen3.5's layers, 256 experts of 512, 8 per
        // token, and a shared expert of 512 in every layer; its language model (the checkpoint's text_config).
        {"qwen3.5-35b-a3b", config("qwen3_5_moe_text", 2048, 512, 40, 16, 2, 248320, 262144, 1e7, 1e-6, false,
                                   qwen3_5_moe_layers())},
        {"olmoe-1b-7b", config("olmoe", 2048, 1024, 16, 16, 16, 50304, 4096, 1e4, 1e-5, false,
                               {{"num_experts", 64}, {"num_experts_per_tok", 8}})},
        {"mixtral-8x7b", config("mixtral", 4096, 14336, 32, 32, 8, 32000, 32768, 1e6, 1e-5, false,
                                {{"num_local_experts", 8}, {"num_experts_per_tok", 2}})},
        {"gpt-oss-20b", config("gpt_oss", 2880, 2880, 24, 64, 8, 201088, 131072, 150000, 1e-5, false,
                               gpt_oss_layers(24, 32))},
        {"gpt-oss-120b", config("gpt_oss", 2880, 2880, 36, 64, 8, 201088, 131072, 150000, 1e-5, false,
                                gpt_oss_layers(36, 128))},
        {"smollm3-3b", config("smollm3", 2048, 11008, 36, 16, 4, 128256, 65536, 5e6, 1e-6, true)},
        {"granite3.3-8b", config("granite", 4096, 12800, 40, 32, 8, 49159, 131072, 1e7, 1e-5, true,
                                 {{"embedding_multiplier", 12.0}, {"residual_multiplier", 0.22},
                                  {"attention_multiplier", 0.0078125}, {"logits_scaling", 16.0}})},
    };
    for (const auto &[name, c] : configs) t[name] = unchecked_shape_from_hf_config(c, "preset " + name);
    return t;
  }();
  return table;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto &[name, shape] : presets()) names.push_back(name);
  return names;
}

std::optional<TransformerShape> find_preset(const std::string &name) {
  auto it = presets().find(name);
  if (it == presets().end()) return std::nullopt;
  return it->second;
}

uint64_t preset_parameter_count(const std::string &name) {
  auto shape = find_preset(name);
  ZF_REQUIRE(shape.has_value(), "no model preset \"%s\"", name.c_str());
  return shape->parameter_count();
}

}  // namespace zf
