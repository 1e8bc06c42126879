// Gemma 4 text (Gemma4ForCausalLM, model_type gemma4_text): Gemma 3's sandwich of norms, but plain
// RMSNorms (w, not 1 + w) and attention unscaled (q and k are RMS-normed per head, v too, without a
// weight); full-attention layers with their own head size (global_head_dim) and key-value heads, whose
// values may be their keys' projection (attention_k_eq_v), under proportional RoPE (a quarter of each
// head's channel pairs turned, base 1e6); the last num_kv_shared_layers layers attend over the keys and
// values of the last earlier layer of their type; per-layer input embeddings (hidden_size_per_layer_input)
// added after each layer; a fixed scalar per layer; soft-capped logits; with enable_moe_block, experts
// beside each layer's MLP (gemma4_moe.hpp). The model is gemma4.cpp.
#include "model/family.hpp"
#include "model/gemma4_layout.hpp"
#include "model/hf_config_fields.hpp"

#include <algorithm>
#include <cmath>
#include <map>

namespace zf {
namespace {

using json = nlohmann::json;

void compose(TransformerShape &s) {
  DecoderFeatures &f = s.features;
  f.placement = NormPlacement::sandwich;
  f.norm_weight = NormWeight::scale_then_cast;
  f.qk_norm = QkNorm::per_head;
  f.activation = "gelu_tanh";
  f.embedding_scale = std::sqrt(double(s.hidden));
  f.attention_scale = 1;
  f.gemma4.on = true;
}

// Every sixth layer global, and the last always (transformers forces it).
void default_layer_types(TransformerShape &s, int64_t window) {
  s.features.sliding_window = window;
  s.features.sliding_layers.clear();
  for (int64_t i = 0; i < s.layers; ++i) s.features.sliding_layers.push_back((i + 1) % 6 != 0 && i + 1 < s.layers);
}

void default_rope(TransformerShape &s) {
  s.features.rope = RopeSpec{};
  s.features.rope.type = "proportional";
  s.features.rope.partial = 0.25;
  s.features.sliding_rope = RopeSpec{};
  s.features.sliding_rope.theta = 1e4;
}

// per_layer_config (as transformers 5 writes it) or global_head_dim / num_global_key_value_heads (as the
// published files do): the full-attention layers' head size and key-value heads, one for all of them.
void read_global_heads(const json &c, const std::string &source, TransformerShape &s) {
  Gemma4Spec &g = s.features.gemma4;
  int64_t head_dim = field_or<int64_t>(c, "global_head_dim", 512, source);
  int64_t kv_heads = g.k_eq_v ? field_or<int64_t>(c, "num_global_key_value_heads", 0, source) : 0;
  if (c.contains("per_layer_config") && !c["per_layer_config"].is_null()) {
    const json &layers = c["per_layer_config"];
    ZF_REQUIRE(layers.is_object(), "%s: config.json field \"per_layer_config\" must be an object of layer index -> "
               "overrides", source.c_str());
    std::map<int64_t, std::pair<int64_t, int64_t>> full;  // layer -> (head_dim, kv_heads)
    for (int64_t i = 0; i < s.layers; ++i)
      if (!s.features.sliding(i)) full[i] = {s.head_dim(), s.kv_heads};
    for (const auto &[key, overrides] : layers.items()) {
      const std::string where = source + " (per_layer_config." + key + ")";
      int64_t layer = -1;
      try { layer = std::stoll(key); } catch (const std::exception &) {}
      ZF_REQUIRE(full.count(layer) && overrides.is_object(), "%s: zfcore reads per_layer_config for the "
                 "full_attention layers of a gemma4_text model, each an object of head_dim and num_key_value_heads",
                 where.c_str());
      for (const auto &[name, value] : overrides.items())
        ZF_REQUIRE(name == "head_dim" || name == "num_key_value_heads", "%s: config.json has the per-layer key \"%s\", "
                   "which zfcore does not read (it reads head_dim and num_key_value_heads)", where.c_str(),
                   excerpt(name).c_str());
      full[layer] = {field_or<int64_t>(overrides, "head_dim", s.head_dim(), where),
                     field_or<int64_t>(overrides, "num_key_value_heads", s.kv_heads, where)};
    }
    for (const auto &[layer, heads] : full)
      ZF_REQUIRE(heads == full.begin()->second, "%s: config.json's per_layer_config gives full_attention layer %lld "
                 "another head size or key-value head count than layer %lld: zfcore computes one for all of them",
                 source.c_str(), (long long)layer, (long long)full.begin()->first);
    std::tie(head_dim, kv_heads) = full.empty() ? std::pair<int64_t, int64_t>{0, 0} : full.begin()->second;
  }
  g.global_head_dim = head_dim == s.head_dim() ? 0 : head_dim;
  g.global_kv_heads = kv_heads == s.kv_heads ? 0 : kv_heads;
}

void read(const json &c, const std::string &source, TransformerShape &s) {
  compose(s);
  DecoderFeatures &f = s.features;
  Gemma4Spec &g = f.gemma4;
  // "vision" makes only image tokens see each other both ways: text, all zfcore runs, stays causal.
  if (field_or<std::string>(c, "use_bidirectional_attention", "vision", source) != "vision")
    require_default(c, "use_bidirectional_attention", nullptr, source, "zfcore's attention is causal");
  require_default(c, "attention_bias", false, source, "Gemma 4's projections have no biases in zfcore");
  if (!c.contains("head_dim")) f.head_dim = s.hidden / s.heads == 256 ? 0 : 256;  // Gemma4TextConfig's default
  f.final_softcap = field_or<double>(c, "final_logit_softcapping", 0.0, source);
  if (!c.contains("layer_types") || c["layer_types"].is_null())
    default_layer_types(s, field_or<int64_t>(c, "sliding_window", 512, source));
  if (f.sliding(s.layers - 1)) f.sliding_layers.back() = 0;  // transformers makes the last layer global
  if (std::find(f.sliding_layers.begin(), f.sliding_layers.end(), 1) == f.sliding_layers.end())
    f.sliding_layers.clear();  // no layer slides
  if (!c.contains("rope_parameters") || c["rope_parameters"].is_null()) {
    default_rope(s);
    s.rope_theta = 1e6;
  }
  ZF_REQUIRE(f.partial_rotary == 1, "%s: config.json has partial_rotary_factor = %g outside a proportional "
             "rope_parameters object, which Gemma 4 does not apply (its full layers' RoPE carries its own)",
             source.c_str(), f.partial_rotary);
  g.k_eq_v = field_or<bool>(c, "attention_k_eq_v", false, source);
  g.kv_shared_layers = field_or<int64_t>(c, "num_kv_shared_layers", 0, source);
  // Written null (some published files), it is off, as transformers tests it.
  const bool per_layer_null = c.contains("hidden_size_per_layer_input") && c["hidden_size_per_layer_input"].is_null();
  g.per_layer_hidden = per_layer_null ? 0 : field_or<int64_t>(c, "hidden_size_per_layer_input", 256, source);
  g.per_layer_vocab = field_or<int64_t>(c, "vocab_size_per_layer_input", 262144, source);
  g.double_wide_mlp = field_or<bool>(c, "use_double_wide_mlp", false, source);
  read_global_heads(c, source, s);
  if (field_or<bool>(c, "enable_moe_block", false, source)) {
    g.experts = field<int64_t>(c, "num_experts", source);
    g.top_k = field<int64_t>(c, "top_k_experts", source);
    g.expert_intermediate = field<int64_t>(c, "moe_intermediate_size", source);
  }
}

void write(const TransformerShape &s, json &c) {
  const DecoderFeatures &f = s.features;
  const Gemma4Spec &g = f.gemma4;
  c["hidden_activation"] = c["hidden_act"];
  c.erase("hidden_act");
  c.erase("mlp_bias");
  c["final_logit_softcapping"] = f.final_softcap > 0 ? json(f.final_softcap) : json(nullptr);
  c["attention_k_eq_v"] = g.k_eq_v;
  c["num_kv_shared_layers"] = g.kv_shared_layers;
  c["hidden_size_per_layer_input"] = g.per_layer_hidden;
  c["vocab_size_per_layer_input"] = g.per_layer_vocab;
  c["use_double_wide_mlp"] = g.double_wide_mlp;
  c["enable_moe_block"] = g.experts > 0;
  c["num_experts"] = g.experts > 0 ? json(g.experts) : json(nullptr);
  c["top_k_experts"] = g.experts > 0 ? json(g.top_k) : json(nullptr);
  c["moe_intermediate_size"] = g.experts > 0 ? json(g.expert_intermediate) : json(nullptr);
  c["use_bidirectional_attention"] = nullptr;
  json layers = json::object();
  for (int64_t i = 0; i < s.layers; ++i) {
    if (f.sliding(i)) continue;
    layers[std::to_string(i)] = {{"head_dim", gemma4_head_dim(s, i)}};
    if (g.global_kv_heads > 0) layers[std::to_string(i)]["num_key_value_heads"] = g.global_kv_heads;
  }
  c["per_layer_config"] = layers;
}

}  // namespace

Family gemma4_family() {
  Family f;
  f.type = "gemma4_text";
  f.architecture = "Gemma4ForCausalLM";
  f.layer_types = f.rope_per_layer_type = true;
  f.default_tie = true;
  f.default_theta = 1e6;
  f.default_vocab = 262144;
  f.default_max_seq = 131072;
  f.read = read;
  f.write = write;
  // By type alone: what Gemma4TextConfig() builds, at the sizes of model.hidden, layers, heads and vocab.
  // Its full-attention layers have heads twice the size (global_head_dim 512 over head_dim 256: here
  // 2 x hidden / heads), every layer a per-layer input of 256 channels (hidden_size_per_layer_input) from a
  // table over the vocabulary; no layer shares keys and values and no values are keys, as there.
  f.defaults = [](TransformerShape &s) {
    compose(s);
    Gemma4Spec &g = s.features.gemma4;
    if (s.features.sliding_layers.empty()) default_layer_types(s, 512);
    if (s.features.rope.type == "default" && s.features.sliding_rope.theta == 0) default_rope(s);
    if (g.global_head_dim == 0) g.global_head_dim = 2 * s.head_dim();
    if (g.per_layer_hidden == 0) {
      g.per_layer_hidden = 256;
      g.per_layer_vocab = s.vocab;
    }
  };
  return f;
}

// Gemma 4's image-text checkpoints (Gemma4ForConditionalGeneration, model_type gemma4): the language model
// above under text_config, its keys the published files leave out filled as Gemma4TextConfig fills them,
// saved as model.language_model.*; its logits soft-capped as the text model's. zfcore runs text only, whose
// per-layer inputs come from the token ids as in the text model.
Family gemma4_image_text_family() {
  return image_text_of(
      gemma4_family(), "gemma4", "Gemma4ForConditionalGeneration", "model.language_model.", "lm_head.weight",
      {{"vocab_size", 262144},   {"hidden_size", 2304},        {"intermediate_size", 9216},
       {"num_hidden_layers", 30}, {"num_attention_heads", 8},   {"num_key_value_heads", 4},
       {"head_dim", 256},         {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
       {"sliding_window", 512},   {"hidden_activation", "gelu_pytorch_tanh"}, {"pad_token_id", 0}});
}

// Where Gemma 4's layers differ (gemma4_layout.hpp).

int64_t gemma4_head_dim(const TransformerShape &s, int64_t layer) {
  const int64_t global = s.features.gemma4.global_head_dim;
  return !s.features.sliding(layer) && global > 0 ? global : s.head_dim();
}

int64_t gemma4_kv_heads(const TransformerShape &s, int64_t layer) {
  const int64_t global = s.features.gemma4.global_kv_heads;
  return !s.features.sliding(layer) && global > 0 ? global : s.kv_heads;
}

bool gemma4_values_are_keys(const TransformerShape &s, int64_t layer) {
  return s.features.gemma4.k_eq_v && !s.features.sliding(layer);
}

int64_t gemma4_first_shared(const TransformerShape &s) { return s.layers - s.features.gemma4.kv_shared_layers; }

int64_t gemma4_kv_source(const TransformerShape &s, int64_t layer) {
  const int64_t first = gemma4_first_shared(s);
  if (layer < first) return layer;
  for (int64_t i = first - 1; i >= 0; --i)
    if (s.features.sliding(i) == s.features.sliding(layer)) return i;
  return -1;
}

int64_t gemma4_mlp_width(const TransformerShape &s, int64_t layer) {
  const bool wide = s.features.gemma4.double_wide_mlp && layer >= gemma4_first_shared(s);
  return s.intermediate * (wide ? 2 : 1);
}

int64_t gemma4_stream_width(const TransformerShape &s) {
  int64_t width = s.hidden + s.layers * s.features.gemma4.per_layer_hidden;
  for (int64_t i = 0; i < gemma4_first_shared(s); ++i) {
    bool reused = false;
    for (int64_t j = gemma4_first_shared(s); j < s.layers; ++j) reused = reused || gemma4_kv_source(s, j) == i;
    if (reused) width += 2 * gemma4_kv_heads(s, i) * gemma4_head_dim(s, i);
  }
  return width;
}

uint64_t gemma4_parameter_count(const TransformerShape &s, bool active) {
  const Gemma4Spec &g = s.features.gemma4;
  const uint64_t h = uint64_t(s.hidden), per = uint64_t(g.per_layer_hidden), l = uint64_t(s.layers);
  uint64_t total = uint64_t(s.vocab) * h * (s.tie_embeddings ? 1 : 2) + h;
  if (per > 0) total += uint64_t(g.per_layer_vocab) * l * per + h * l * per + per;
  for (int64_t i = 0; i < s.layers; ++i) {
    const uint64_t d = uint64_t(gemma4_head_dim(s, i)), kv = uint64_t(gemma4_kv_heads(s, i)) * d;
    total += 2 * h * uint64_t(s.heads) * d + d;  // q, o, q_norm
    if (gemma4_kv_source(s, i) == i) total += h * kv * (gemma4_values_are_keys(s, i) ? 1 : 2) + d;  // k, v, k_norm
    total += 3 * h * uint64_t(gemma4_mlp_width(s, i)) + 4 * h + 1;  // the MLP, four norms, the layer scalar
    if (per > 0) total += 2 * h * per + h;
    // The experts: router (proj, scale, per-expert scale), three norms, and each expert's gate_up and down
    // (with `active`, the top k of them).
    const uint64_t e = uint64_t(g.experts), used = active ? uint64_t(g.top_k) : e;
    if (e > 0) total += e * h + h + e + 3 * h + used * 3 * h * uint64_t(g.expert_intermediate);
  }
  return total;
}

void gemma4_validate(const TransformerShape &s, const char *where) {
  const Gemma4Spec &g = s.features.gemma4;
  ZF_REQUIRE(g.kv_shared_layers >= 0 && g.kv_shared_layers < s.layers,
             "%s: num_kv_shared_layers = %lld must be >= 0 and below the %lld layers", where,
             (long long)g.kv_shared_layers, (long long)s.layers);
  for (int64_t i = gemma4_first_shared(s); i < s.layers; ++i)
    ZF_REQUIRE(gemma4_kv_source(s, i) >= 0, "%s: layer %lld shares keys and values (num_kv_shared_layers = %lld), "
               "but no earlier layer of its type computes them", where, (long long)i, (long long)g.kv_shared_layers);
  ZF_REQUIRE(g.per_layer_hidden >= 0 && (g.per_layer_hidden == 0 || g.per_layer_vocab > 0),
             "%s: hidden_size_per_layer_input = %lld needs vocab_size_per_layer_input > 0", where,
             (long long)g.per_layer_hidden);
  ZF_REQUIRE(g.experts == 0 || (g.top_k > 0 && g.top_k <= g.experts && g.expert_intermediate > 0),
             "%s: enable_moe_block needs num_experts > 0, top_k_experts in [1, num_experts] and "
             "moe_intermediate_size > 0 (has %lld, %lld, %lld)", where, (long long)g.experts, (long long)g.top_k,
             (long long)g.expert_intermediate);
  for (int64_t i = 0; i < s.layers; ++i) {
    ZF_REQUIRE(gemma4_head_dim(s, i) % 2 == 0 && s.heads % gemma4_kv_heads(s, i) == 0,
               "%s: layer %lld has head_dim %lld and %lld key-value heads: the head size must be even and the %lld "
               "heads a multiple of the key-value heads", where, (long long)i, (long long)gemma4_head_dim(s, i),
               (long long)gemma4_kv_heads(s, i), (long long)s.heads);
  }
}

}  // namespace zf
