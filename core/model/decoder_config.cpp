// The config.json keys that every family of the Llama lineage shares (family.hpp): sizes, head_dim,
// RoPE and its scaling, sliding windows, the activation and the biases, read into a shape and
// written back for an export.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

namespace zf {
namespace {

using json = nlohmann::json;

// One rope_parameters (or rope_scaling) object. Its rope_theta, when it has one, goes to `theta`.
RopeSpec read_rope(const json &rope, const std::string &source, const char *key, double &theta, double &partial,
                   double &llama4_beta) {
  ZF_REQUIRE(rope.is_object(), "%s: config.json field \"%s\" = %s must be an object like {\"rope_type\": \"default\"}",
             source.c_str(), key, excerpt(rope.dump()).c_str());
  RopeSpec spec;
  spec.type = field_or<std::string>(rope, "rope_type", field_or<std::string>(rope, "type", "default", source), source);
  ZF_REQUIRE(spec.type == "default" || spec.type == "linear" || spec.type == "llama3" || spec.type == "yarn" ||
                 spec.type == "proportional",
             "%s: config.json has \"%s\" of type \"%s\"; zfcore computes RoPE of type default, linear, llama3, yarn "
             "and proportional", source.c_str(), key, excerpt(spec.type).c_str());
  theta = field_or<double>(rope, "rope_theta", theta, source);
  if (spec.type == "proportional") {  // its partial_rotary_factor leaves pairs unturned within the whole head
    spec.partial = field_or<double>(rope, "partial_rotary_factor", 1.0, source);
    spec.factor = field_or<double>(rope, "factor", 1.0, source);
    ZF_REQUIRE(spec.partial >= 0 && spec.partial <= 1 && spec.factor > 0,
               "%s: config.json \"%s\" of type proportional needs partial_rotary_factor in [0, 1] and factor > 0",
               source.c_str(), key);
    return spec;
  }
  partial = field_or<double>(rope, "partial_rotary_factor", partial, source);
  llama4_beta = field_or<double>(rope, "llama_4_scaling_beta", llama4_beta, source);
  // M-RoPE (Qwen3.5): the rotated channels split by mrope_section among three position axes (time, height,
  // width of an image). zfcore's positions are text's, the same on every axis, where M-RoPE is this 1-D RoPE
  // whatever the sections and their interleaving: read for their form only.
  if (rope.contains("mrope_section") && !rope["mrope_section"].is_null()) {
    const json &sections = rope["mrope_section"];
    bool whole = sections.is_array();
    for (const json &one : sections) whole = whole && one.is_number_integer() && one.get<int64_t>() >= 0;
    ZF_REQUIRE(whole, "%s: config.json's \"%s\" has mrope_section = %s: expected a list of whole numbers >= 0, such "
               "as [11, 11, 10]", source.c_str(), key, excerpt(sections.dump()).c_str());
  }
  field_or<bool>(rope, "mrope_interleaved", false, source);
  if (spec.type == "default") return spec;
  spec.original_max = field_or<int64_t>(rope, "original_max_position_embeddings", 0, source);
  if (spec.type == "linear" || spec.type == "llama3") spec.factor = field<double>(rope, "factor", source);
  if (spec.type == "llama3") {
    spec.low_freq_factor = field<double>(rope, "low_freq_factor", source);
    spec.high_freq_factor = field<double>(rope, "high_freq_factor", source);
    ZF_REQUIRE(spec.original_max > 0 && spec.high_freq_factor != spec.low_freq_factor,
               "%s: config.json \"%s\" of type llama3 needs original_max_position_embeddings > 0 and "
               "high_freq_factor != low_freq_factor", source.c_str(), key);
  }
  if (spec.type == "yarn") {
    ZF_REQUIRE(spec.original_max > 0, "%s: config.json \"%s\" of type yarn needs original_max_position_embeddings",
               source.c_str(), key);
    spec.factor = field_or<double>(rope, "factor", 0.0, source);  // 0: max_position_embeddings / original
    spec.beta_fast = field_or<double>(rope, "beta_fast", 32.0, source);
    spec.beta_slow = field_or<double>(rope, "beta_slow", 1.0, source);
    spec.attention_factor = field_or<double>(rope, "attention_factor", 0.0, source);
    spec.mscale = field_or<double>(rope, "mscale", 0.0, source);
    spec.mscale_all_dim = field_or<double>(rope, "mscale_all_dim", 0.0, source);
    spec.truncate = field_or<bool>(rope, "truncate", true, source);
  }
  return spec;
}

json write_rope(const RopeSpec &spec, double theta) {
  json rope = {{"rope_type", spec.type}, {"rope_theta", theta}};
  if (spec.type == "proportional") {
    rope["partial_rotary_factor"] = spec.partial;
    if (spec.factor != 1) rope["factor"] = spec.factor;
    return rope;
  }
  if (spec.type == "linear" || spec.type == "llama3") rope["factor"] = spec.factor;
  if (spec.type == "llama3") {
    rope["low_freq_factor"] = spec.low_freq_factor;
    rope["high_freq_factor"] = spec.high_freq_factor;
  }
  if (spec.type != "default") rope["original_max_position_embeddings"] = spec.original_max;
  if (spec.type == "yarn") {
    if (spec.factor > 0) rope["factor"] = spec.factor;
    rope["beta_fast"] = spec.beta_fast;
    rope["beta_slow"] = spec.beta_slow;
    if (spec.attention_factor > 0) rope["attention_factor"] = spec.attention_factor;
    if (spec.mscale > 0) rope["mscale"] = spec.mscale;
    if (spec.mscale_all_dim > 0) rope["mscale_all_dim"] = spec.mscale_all_dim;
    rope["truncate"] = spec.truncate;
  }
  return rope;
}

// rope_parameters (transformers 5) or rope_scaling (4): one object, or one per layer type.
void read_rope_config(const json &c, const std::string &source, TransformerShape &s) {
  DecoderFeatures &f = s.features;
  double partial = field_or<double>(c, "partial_rotary_factor", 1.0, source);
  for (const char *key : {"rope_scaling", "rope_parameters"}) {  // the newer spelling read last, so it wins
    if (!c.contains(key) || c[key].is_null()) continue;
    const json &rope = c[key];
    if (rope.is_object() && (rope.contains("full_attention") || rope.contains("sliding_attention"))) {
      for (const auto &[layer_type, params] : rope.items()) {
        ZF_REQUIRE(layer_type == "full_attention" || layer_type == "sliding_attention",
                   "%s: config.json \"%s\" has parameters for layer type \"%s\"; zfcore knows full_attention and "
                   "sliding_attention", source.c_str(), key, excerpt(layer_type).c_str());
        if (params.is_null()) continue;
        if (layer_type == "full_attention") {
          f.rope = read_rope(params, source, key, s.rope_theta, partial, f.llama4_scaling_beta);
        } else {
          double theta = s.rope_theta;
          f.sliding_rope = read_rope(params, source, key, theta, partial, f.llama4_scaling_beta);
          f.sliding_rope.theta = theta;
        }
      }
    } else {
      f.rope = read_rope(rope, source, key, s.rope_theta, partial, f.llama4_scaling_beta);
    }
  }
  f.partial_rotary = partial;
  ZF_REQUIRE(partial > 0 && partial <= 1, "%s: config.json has partial_rotary_factor = %g: must be in (0, 1]",
             source.c_str(), partial);
  if (f.rope.type == "yarn" && f.rope.factor == 0) f.rope.factor = double(s.max_seq) / double(f.rope.original_max);
  // A sliding rope identical to the full one (but for its base) is kept apart only when its base differs.
  if (f.sliding_rope.theta == s.rope_theta && f.sliding_rope.type == f.rope.type) f.sliding_rope = RopeSpec{};
}

// layer_types, or the families' older spellings: sliding_window for every layer (Mistral, Phi-3), or
// use_sliding_window from max_window_layers on (Qwen2, Qwen3).
void read_layer_types(const json &c, const std::string &source, const Family &family, TransformerShape &s) {
  DecoderFeatures &f = s.features;
  const int64_t window = field_or<int64_t>(c, "sliding_window", 0, source);
  std::vector<uint8_t> sliding, linear;
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    ZF_REQUIRE(int64_t(c["layer_types"].size()) == s.layers,
               "%s: config.json has %zu layer_types for %lld layers", source.c_str(), c["layer_types"].size(),
               (long long)s.layers);
    for (const json &kind : c["layer_types"]) {
      const bool known = kind == "full_attention" || kind == "sliding_attention" ||
                         (family.linear_attention && kind == "linear_attention");
      ZF_REQUIRE(known,
                 "%s: config.json has a layer of type %s; zfcore computes full_attention and sliding_attention "
                 "layers%s (a %s model with such layers is not supported yet)",
                 source.c_str(), excerpt(kind.dump()).c_str(),
                 family.linear_attention ? " and linear_attention (Gated DeltaNet) ones" : "", family.type.c_str());
      sliding.push_back(kind == "sliding_attention");
      linear.push_back(kind == "linear_attention");
    }
    bool any_linear = false;
    for (uint8_t one : linear) any_linear = any_linear || one;
    if (any_linear) f.linear_layers = linear;
  } else if (c.contains("use_sliding_window")) {
    if (field<bool>(c, "use_sliding_window", source) && window > 0) {
      const int64_t from = field_or<int64_t>(c, "max_window_layers", s.layers, source);
      for (int64_t i = 0; i < s.layers; ++i) sliding.push_back(i >= from);
    }
  } else if (window > 0) {
    sliding.assign(size_t(s.layers), 1);
  }
  bool any = false;
  for (uint8_t one : sliding) any = any || one;
  if (!any) return;
  ZF_REQUIRE(window > 0, "%s: config.json has sliding_attention layers but no sliding_window", source.c_str());
  f.sliding_window = window;
  f.sliding_layers = sliding;
}

}  // namespace

void read_decoder_config(const json &c, const std::string &source, const Family &family, TransformerShape &s) {
  if (family.image_text()) return read_image_text_config(c, source, family, s);
  DecoderFeatures &f = s.features;
  s.type = family.type;
  s.hidden = field<int64_t>(c, "hidden_size", source);
  s.intermediate = field<int64_t>(c, family.intermediate_key, source);
  s.layers = field<int64_t>(c, "num_hidden_layers", source);
  s.heads = field<int64_t>(c, "num_attention_heads", source);
  s.kv_heads = field_or<int64_t>(c, "num_key_value_heads", s.heads, source);
  s.vocab = field<int64_t>(c, "vocab_size", source);
  s.max_seq = field_or<int64_t>(c, "max_position_embeddings", family.default_max_seq, source);
  s.norm_eps = field_or<double>(c, "rms_norm_eps", family.default_norm_eps, source);
  s.tie_embeddings = field_or<bool>(c, "tie_word_embeddings", family.default_tie, source);
  s.rope_theta = field_or<double>(c, "rope_theta", family.default_theta, source);
  const int64_t head_dim = field_or<int64_t>(c, "head_dim", 0, source);
  f.head_dim = s.heads > 0 && head_dim == s.hidden / s.heads ? 0 : head_dim;
  read_rope_config(c, source, s);
  read_layer_types(c, source, family, s);
  f.attention_bias = field_or<bool>(c, "attention_bias", false, source);
  f.mlp_bias = field_or<bool>(c, "mlp_bias", false, source);
  const std::string activation =
      field_or<std::string>(c, "hidden_activation", field_or<std::string>(c, "hidden_act", "silu", source), source);
  ZF_REQUIRE(activation == "silu" || activation == "gelu_pytorch_tanh",
             "%s: config.json has the activation \"%s\"; zfcore's gated MLP computes silu and gelu_pytorch_tanh",
             source.c_str(), excerpt(activation).c_str());
  f.activation = activation == "silu" ? "silu" : "gelu_tanh";
  if (family.read) family.read(c, source, s);
}

void write_decoder_config(const TransformerShape &s, const Family &family, json &c) {
  if (family.image_text()) return write_image_text_config(s, family, c);
  const DecoderFeatures &f = s.features;
  c["architectures"] = json::array({family.architecture});
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim();
  c["max_position_embeddings"] = s.max_seq;
  c["rms_norm_eps"] = s.norm_eps;
  json rope = write_rope(f.rope, s.rope_theta);
  if (f.partial_rotary != 1) rope["partial_rotary_factor"] = f.partial_rotary;
  if (f.llama4_scaling_beta != 0) rope["llama_4_scaling_beta"] = f.llama4_scaling_beta;
  if (family.layer_types || !f.sliding_layers.empty()) {
    json types = json::array();
    for (int64_t i = 0; i < s.layers; ++i) types.push_back(f.sliding(i) ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    // transformers builds the masks of both layer types for the families with a rope per layer type: they
    // need a window even where no layer slides.
    c["sliding_window"] = !f.sliding_layers.empty()   ? json(f.sliding_window)
                          : family.rope_per_layer_type ? json(s.max_seq)
                                                       : json(nullptr);
  }
  if (family.rope_per_layer_type || f.sliding_rope.theta > 0)
    rope = {{"full_attention", rope},
            {"sliding_attention", f.sliding_rope.theta > 0 ? write_rope(f.sliding_rope, f.sliding_rope.theta) : rope}};
  c["rope_parameters"] = rope;
  c["hidden_act"] = f.activation == "silu" ? "silu" : "gelu_pytorch_tanh";
  c["attention_bias"] = f.attention_bias;
  c["mlp_bias"] = f.mlp_bias;
  // No embedding row is held fixed (TransformerOptions::padding_idx) unless a source config.json says so,
  // whatever the family's class defaults to.
  c["pad_token_id"] = nullptr;
  if (family.write) family.write(s, c);
}

}  // namespace zf
