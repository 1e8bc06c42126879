// Qwen3.5 dense (Qwen3_5ForCausalLM, model_type qwen3_5_text): three of every four layers mix tokens
// with a Gated DeltaNet (gated_deltanet.hpp) instead of attention (layer_types "linear_attention",
// sized by the linear_* keys); the full-attention layers have an output gate (q_proj's doubled
// width), (1 + w) RMSNorms over each head of q and k, and RoPE over a quarter of each head
// (partial_rotary_factor 0.25). Every RMSNorm but the DeltaNet's gated one is (1 + w), in fp32.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

namespace zf {
namespace {

void compose(TransformerShape &s) {
  DecoderFeatures &f = s.features;
  f.norm_weight = NormWeight::one_plus;
  f.qk_norm = QkNorm::per_head;
  f.attention_output_gate = true;
}

void read(const nlohmann::json &c, const std::string &source, TransformerShape &s) {
  compose(s);
  DecoderFeatures &f = s.features;
  DeltaNetSpec &d = f.deltanet;
  d.key_heads = field_or<int64_t>(c, "linear_num_key_heads", 16, source);
  d.value_heads = field_or<int64_t>(c, "linear_num_value_heads", 32, source);
  d.key_dim = field_or<int64_t>(c, "linear_key_head_dim", 128, source);
  d.value_dim = field_or<int64_t>(c, "linear_value_head_dim", 128, source);
  d.conv_kernel = field_or<int64_t>(c, "linear_conv_kernel_dim", 4, source);
  ZF_REQUIRE(d.key_heads > 0 && d.value_heads > 0 && d.key_dim > 0 && d.value_dim > 0 && d.conv_kernel > 0 &&
                 d.value_heads % d.key_heads == 0,
             "%s: config.json's linear_num_key_heads (%lld), linear_num_value_heads (%lld), linear_key_head_dim, "
             "linear_value_head_dim and linear_conv_kernel_dim must be > 0, the value heads a multiple of the key "
             "heads", source.c_str(), (long long)d.key_heads, (long long)d.value_heads);
  // transformers' rule when config.json lists no layer_types: every full_attention_interval-th layer is full.
  if (!c.contains("layer_types") || c["layer_types"].is_null()) {
    const int64_t interval = field_or<int64_t>(c, "full_attention_interval", 4, source);
    ZF_REQUIRE(interval > 0, "%s: config.json has full_attention_interval = %lld: must be > 0", source.c_str(),
               (long long)interval);
    for (int64_t i = 0; i < s.layers; ++i) f.linear_layers.push_back((i + 1) % interval != 0);
  }
  // transformers' default when neither the config nor its rope_parameters say.
  const bool partial_given = c.contains("partial_rotary_factor") ||
                             (c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
                              c["rope_parameters"].contains("partial_rotary_factor"));
  if (!partial_given) f.partial_rotary = 0.25;
  require_default(c, "attention_bias", false, source, "Qwen3.5's projections have no biases");
  // transformers always gates Qwen3.5's attention (q_proj holds the gate): a config without the gate is another model.
  require_default(c, "attn_output_gate", true, source, "Qwen3.5's full attention has an output gate");
  // Multi-token-prediction layers (mtp.*) serve speculative decoding, not the loss: not built, not trained; an
  // image-text checkpoint's pass through an export unchanged (image_text.cpp).
  const int64_t mtp = field_or<int64_t>(c, "mtp_num_hidden_layers", 0, source);
  ZF_REQUIRE(mtp >= 0, "%s: config.json has mtp_num_hidden_layers = %lld: must be >= 0", source.c_str(),
             (long long)mtp);
  field_or<bool>(c, "mtp_use_dedicated_embeddings", false, source);  // of the MTP layers alone
}

void write(const TransformerShape &s, nlohmann::json &c) {
  const DecoderFeatures &f = s.features;
  const DeltaNetSpec &d = f.deltanet;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < s.layers; ++i) types.push_back(f.linear(i) ? "linear_attention" : "full_attention");
  c["layer_types"] = types;
  c["linear_num_key_heads"] = d.key_heads;
  c["linear_num_value_heads"] = d.value_heads;
  c["linear_key_head_dim"] = d.key_dim;
  c["linear_value_head_dim"] = d.value_dim;
  c["linear_conv_kernel_dim"] = d.conv_kernel;
  c["rope_parameters"]["partial_rotary_factor"] = f.partial_rotary;
  c.erase("mlp_bias");
}

Family qwen3_5(const char *type, const char *architecture) {
  Family f;
  f.type = type;
  f.architecture = architecture;
  f.linear_attention = true;
  f.default_theta = 1e7;
  f.default_vocab = 248320;
  f.default_max_seq = 262144;
  f.read = read;
  f.write = write;
  f.defaults = [](TransformerShape &s) {
    compose(s);
    DeltaNetSpec &d = s.features.deltanet;
    if (d.key_heads == 0) d = DeltaNetSpec{16, 128, 32, 128, 4};
    if (s.features.linear_layers.empty())
      for (int64_t i = 0; i < s.layers; ++i) s.features.linear_layers.push_back((i + 1) % 4 != 0);
    if (s.features.partial_rotary == 1) s.features.partial_rotary = 0.25;
  };
  return f;
}

}  // namespace

Family qwen3_5_text_family() { return qwen3_5("qwen3_5_text", "Qwen3_5ForCausalLM"); }

// Qwen3.5's image-text checkpoints (Qwen3_5ForConditionalGeneration, model_type qwen3_5: every published
// Qwen3.5): the language model above under text_config, saved as model.language_model.*; its vision
// tower (model.visual.*) and multi-token-prediction layers (mtp.*) pass through an export unchanged.
Family qwen3_5_image_text_family() {
  return image_text_of(qwen3_5_text_family(), "qwen3_5", "Qwen3_5ForConditionalGeneration", "model.language_model.",
                       "lm_head.weight");
}

}  // namespace zf
