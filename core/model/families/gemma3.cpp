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
  if (f.sliding_layers.empty() && !c.contains("layer_types")) {
    const int64_t pattern = field_or<int64_t>(c, "sliding_window_pattern", 6, source);
    f.sliding_window = field_or<int64_t>(c, "sliding_window", 4096, source);
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

}  // namespace zf
