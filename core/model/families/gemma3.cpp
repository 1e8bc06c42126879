// Gemma 3 text (Gemma3ForCausalLM, model_type gemma3_text): norms before and after each branch, each
// (1 + w) in fp32; RMSNorms over each head of q and k; GeGLU (tanh GELU); embeddings scaled by
// sqrt(hidden); attention scaled by query_pre_attn_scalar^-1/2; local sliding-window layers (five
// of every six) with their own RoPE base; a tied head, optionally soft-capped.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

#include <cmath>

namespace zf {
namespace {

void compose(TransformerShape &s) {
  DecoderFeatures &f = s.features;
  f.placement = NormPlacement::sandwich;
  f.norm_weight = NormWeight::one_plus;
  f.qk_norm = QkNorm::per_head;
  f.activation = "gelu_tanh";
  f.embedding_scale = std::sqrt(double(s.hidden));
}

void read(const nlohmann::json &c, const std::string &source, TransformerShape &s) {
  compose(s);
  DecoderFeatures &f = s.features;
  f.attention_scale = 1 / std::sqrt(field_or<double>(c, "query_pre_attn_scalar", double(s.head_dim()), source));
  if (f.attention_scale == 1 / std::sqrt(double(s.head_dim()))) f.attention_scale = 0;
  f.final_softcap = field_or<double>(c, "final_logit_softcapping", 0.0, source);
  require_default(c, "attn_logit_softcapping", nullptr, source, "attention scores are not soft-capped");
  require_default(c, "use_bidirectional_attention", false, source, "attention is causal");
  // transformers 4 spelled the local layers' base and their pattern apart.
  if (c.contains("rope_local_base_freq") && f.sliding_rope.theta == 0) {
    f.sliding_rope.theta = field<double>(c, "rope_local_base_freq", source);
    if (f.sliding_rope.theta == s.rope_theta && f.rope.type == "default") f.sliding_rope = RopeSpec{};
  }
  // Without layer_types, every sliding_window_pattern-th layer is global (not every layer local, as
  // the other families read a lone sliding_window).
  if (!c.contains("layer_types") || c["layer_types"].is_null()) {
    const int64_t pattern = field_or<int64_t>(c, "sliding_window_pattern", 6, source);
    ZF_REQUIRE(pattern > 0, "%s: config.json has sliding_window_pattern = %lld: must be > 0", source.c_str(),
               (long long)pattern);
    f.sliding_window = field_or<int64_t>(c, "sliding_window", 4096, source);
    f.sliding_layers.clear();
    for (int64_t i = 0; i < s.layers; ++i) f.sliding_layers.push_back((i + 1) % pattern != 0);
  }
}

void write(const TransformerShape &s, nlohmann::json &c) {
  const DecoderFeatures &f = s.features;
  c["hidden_activation"] = c["hidden_act"];
  c.erase("hidden_act");
  c.erase("mlp_bias");
  const double scalar = f.attention_scale > 0 ? 1 / (f.attention_scale * f.attention_scale) : double(s.head_dim());
  c["query_pre_attn_scalar"] = std::round(scalar) == scalar ? nlohmann::json(int64_t(scalar)) : nlohmann::json(scalar);
  c["final_logit_softcapping"] = f.final_softcap > 0 ? nlohmann::json(f.final_softcap) : nlohmann::json(nullptr);
  c["attn_logit_softcapping"] = nullptr;
}

}  // namespace

Family gemma3_family() {
  Family f;
  f.type = "gemma3_text";
  f.architecture = "Gemma3ForCausalLM";
  f.layer_types = f.rope_per_layer_type = true;
  f.default_tie = true;
  f.default_theta = 1e6;
  f.default_vocab = 262208;
  f.default_max_seq = 131072;
  f.read = read;
  f.write = write;
  f.defaults = [](TransformerShape &s) {
    compose(s);
    if (s.features.sliding_layers.empty()) {  // Gemma 3's local layers: a 512-token window, base 10000
      s.features.sliding_window = 512;
      for (int64_t i = 0; i < s.layers; ++i) s.features.sliding_layers.push_back((i + 1) % 6 != 0);
      s.features.sliding_rope.theta = 1e4;
    }
  };
  return f;
}

// Gemma 3's image-text checkpoints (Gemma3ForConditionalGeneration, model_type gemma3: gemma-3-4b-it
// and larger): the language model above under text_config, whose published files leave most keys to
// transformers' Gemma3TextConfig defaults (the 4B's shape), saved as language_model.model.*. Its
// logits are not soft-capped.
Family gemma3_image_text_family() {
  Family f = image_text_of(
      gemma3_family(), "gemma3", "Gemma3ForConditionalGeneration", "language_model.model.",
      "language_model.lm_head.weight",
      {{"vocab_size", 262208},  {"num_attention_heads", 8},     {"num_key_value_heads", 4},
       {"head_dim", 256},        {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
       {"rope_theta", 1e6},      {"rope_local_base_freq", 1e4}, {"query_pre_attn_scalar", 256},
       {"sliding_window", 4096}, {"hidden_activation", "gelu_pytorch_tanh"}, {"pad_token_id", 0}});
  // After the language model's keys: Gemma3ForConditionalGeneration's head is not soft-capped, whatever
  // text_config's final_logit_softcapping (transformers applies it in Gemma3ForCausalLM only).
  f.read = [](const nlohmann::json &, const std::string &, TransformerShape &s) { s.features.final_softcap = 0; };
  return f;
}

}  // namespace zf
