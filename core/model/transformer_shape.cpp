#include "model/transformer_shape.hpp"

#include "config/limits.hpp"
#include "model/family.hpp"
#include "model/gemma4_layout.hpp"
#include "model/hf_config_fields.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace zf {
namespace {

using json = nlohmann::json;

TransformerShape gpt2_from_hf(const json &c, const std::string &source) {
  TransformerShape s;
  s.type = "gpt2";
  s.hidden = field<int64_t>(c, "n_embd", source);
  s.layers = field<int64_t>(c, "n_layer", source);
  s.heads = s.kv_heads = field<int64_t>(c, "n_head", source);
  s.intermediate = field_or<int64_t>(c, "n_inner", 4 * s.hidden, source);
  s.vocab = field<int64_t>(c, "vocab_size", source);
  s.max_seq = field<int64_t>(c, "n_positions", source);
  s.norm_eps = field_or<double>(c, "layer_norm_epsilon", 1e-5, source);
  s.tie_embeddings = field_or<bool>(c, "tie_word_embeddings", true, source);
  s.qkv_bias = true;
  std::string activation = field_or<std::string>(c, "activation_function", "gelu_new", source);
  ZF_REQUIRE(activation == "gelu_new" || activation == "gelu_pytorch_tanh",
             "%s: config.json has \"activation_function\": \"%s\"; zfcore's GPT-2 uses the tanh GELU (gelu_new)",
             source.c_str(), excerpt(activation).c_str());
  require_default(c, "scale_attn_weights", true, source, "attention scores are always scaled by 1/sqrt(head_dim)");
  require_default(c, "scale_attn_by_inverse_layer_idx", false, source, "no per-layer attention scaling");
  require_default(c, "add_cross_attention", false, source, "decoder-only models");
  return s;
}

}  // namespace

uint64_t TransformerShape::parameter_count() const { return counted_parameters(false); }
uint64_t TransformerShape::active_parameter_count() const { return counted_parameters(true); }

uint64_t TransformerShape::counted_parameters(bool active) const {
  uint64_t h = uint64_t(hidden), l = uint64_t(layers), v = uint64_t(vocab), i = uint64_t(intermediate);
  uint64_t embeddings = v * h, head = tie_embeddings ? 0 : v * h;
  if (is_gpt2()) {
    uint64_t per_layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (i * h + i) + (h * i + h);
    return embeddings + uint64_t(max_seq) * h + l * per_layer + 2 * h + head;
  }
  const DecoderFeatures &f = features;
  if (f.gemma4.on) return gemma4_parameter_count(*this, active);
  uint64_t q = uint64_t(heads * head_dim()), kv = uint64_t(kv_heads * head_dim()), d = uint64_t(head_dim());
  uint64_t attention = h * q * (f.attention_output_gate ? 2 : 1) + 2 * h * kv + q * h +
                      (qkv_bias ? q + 2 * kv : 0) + (f.attention_bias ? q + 2 * kv + h : 0);
  attention += f.qk_norm == QkNorm::per_head ? 2 * d : f.qk_norm == QkNorm::whole ? q + kv : 0;
  attention += f.attention_sinks ? uint64_t(heads) : 0;
  uint64_t mlp = 3 * h * i + (f.mlp_bias ? 2 * i + h : 0);
  uint64_t norms = (f.placement == NormPlacement::sandwich ? 4 : 2) * h;
  // A Gated DeltaNet layer: in_proj_qkv, z, b and a; the convolution; dt_bias, A_log; the gated norm; out_proj.
  const DeltaNetSpec &n = f.deltanet;
  const uint64_t channels = uint64_t(n.conv_channels()), values = uint64_t(n.value_heads * n.value_dim);
  const uint64_t deltanet = h * (channels + values + 2 * uint64_t(n.value_heads)) + channels * uint64_t(n.conv_kernel) +
                            2 * uint64_t(n.value_heads) + uint64_t(n.value_dim) + values * h;
  uint64_t linear = 0;
  for (uint8_t one : f.linear_layers) linear += one;
  // A sparse layer: its router and its experts (with `active`, the top k of them) instead of the MLP.
  const MoeSpec &m = f.moe;
  uint64_t sparse = 0;
  for (int64_t layer = 0; layer < layers; ++layer) sparse += f.sparse(layer);
  const uint64_t experts = uint64_t(active ? m.top_k : m.experts);
  uint64_t moe = uint64_t(m.experts) * h + experts * 3 * h * uint64_t(m.expert_intermediate) +
                 (m.shared_intermediate > 0 ? 3 * h * uint64_t(m.shared_intermediate) + h : 0);  // shared, its gate
  if (m.fused()) moe += uint64_t(m.experts) + experts * (2 * uint64_t(m.expert_intermediate) + h);  // gpt-oss's biases
  return embeddings + (l - sparse) * mlp + sparse * moe + l * norms + (l - linear) * attention + linear * deltanet +
         h + head;
}

void TransformerShape::validate(const std::string &source) const {
  const char *where = source.c_str();
  ZF_REQUIRE(is_transformer_type(type), "%s: model type \"%s\" is not one of %s", where, type.c_str(),
             family_names().c_str());
  for (auto [key, value] : {std::pair<const char *, int64_t>{"hidden", hidden}, {"layers", layers},
                            {"heads", heads}, {"kv_heads", kv_heads}, {"intermediate", intermediate},
                            {"vocab", vocab}, {"max_seq", max_seq}})
  {
    ZF_REQUIRE(value > 0, "%s: model.%s = %lld must be > 0", where, key, (long long)value);
    for (const zf_param_decl &decl : model_schema())
      ZF_REQUIRE(std::string(decl.key) != key || !(decl.flags & ZF_PARAM_HAS_MAX) || double(value) <= decl.max,
                 "%s: model.%s = %lld must be <= %.0f", where, key, (long long)value, decl.max);
  }
  ZF_REQUIRE(features.head_dim > 0 || hidden % heads == 0,
             "%s: model.hidden = %lld is not divisible by model.heads = %lld", where, (long long)hidden,
             (long long)heads);
  ZF_REQUIRE(heads % kv_heads == 0, "%s: model.heads = %lld is not divisible by model.kv_heads = %lld", where,
             (long long)heads, (long long)kv_heads);
  ZF_REQUIRE(norm_eps > 0, "%s: model.norm_eps must be > 0", where);
  if (is_gpt2()) {
    ZF_REQUIRE(kv_heads == heads, "%s: GPT-2 has no grouped-query attention: model.kv_heads must equal heads (%lld)",
               where, (long long)heads);
    ZF_REQUIRE(qkv_bias, "%s: GPT-2 always has attention biases: remove model.qkv_bias = false", where);
  } else {
    const DecoderFeatures &f = features;
    ZF_REQUIRE(head_dim() % 2 == 0, "%s: RoPE needs an even head size, but head_dim = %lld", where,
               (long long)head_dim());
    ZF_REQUIRE(rope_theta > 0, "%s: model.rope_theta must be > 0", where);
    ZF_REQUIRE(qkv_bias == (type == "qwen2"),
               "%s: model.qkv_bias = %s does not fit type \"%s\" (Qwen2 has q/k/v biases, the other families "
               "none or all four: use type = \"%s\")",
               where, qkv_bias ? "true" : "false", type.c_str(), qkv_bias ? "qwen2" : "llama");
    ZF_REQUIRE(f.sliding_layers.empty() || (int64_t(f.sliding_layers.size()) == layers && f.sliding_window > 0),
               "%s: the sliding-window layers must be one entry per layer, with a window > 0", where);
    ZF_REQUIRE(f.rope_layers.empty() || int64_t(f.rope_layers.size()) == layers,
               "%s: the layers without RoPE must be one entry per layer", where);
    const DeltaNetSpec &n = f.deltanet;
    ZF_REQUIRE(f.linear_layers.empty() ||
                   (int64_t(f.linear_layers.size()) == layers && n.key_heads > 0 && n.key_dim > 0 &&
                    n.value_heads > 0 && n.value_dim > 0 && n.conv_kernel > 0 && n.value_heads % n.key_heads == 0),
               "%s: the Gated DeltaNet layers must be one entry per layer, with key and value heads, head sizes and "
               "a convolution kernel > 0 (value heads a multiple of key heads)", where);
    if (f.gemma4.on) gemma4_validate(*this, where);
    ZF_REQUIRE(int64_t(double(head_dim()) * f.partial_rotary) % 2 == 0,
               "%s: partial_rotary_factor %g of head_dim %lld must rotate an even number of channels", where,
               f.partial_rotary, (long long)head_dim());
  }
}

bool TransformerShape::operator==(const TransformerShape &o) const {
  return type == o.type && hidden == o.hidden && layers == o.layers && heads == o.heads && kv_heads == o.kv_heads &&
         intermediate == o.intermediate && vocab == o.vocab && max_seq == o.max_seq &&
         (is_gpt2() || rope_theta == o.rope_theta) &&  // GPT-2 has no RoPE
         norm_eps == o.norm_eps && tie_embeddings == o.tie_embeddings && qkv_bias == o.qkv_bias &&
         (is_gpt2() || features == o.features);
}

std::string shape_difference(const TransformerShape &a, const TransformerShape &b, const char *a_name,
                             const char *b_name) {
  if (a.type != b.type) return format("type = %s %s, %s %s", a.type.c_str(), a_name, b.type.c_str(), b_name);
  std::pair<const char *, std::pair<double, double>> fields[] = {
      {"hidden", {double(a.hidden), double(b.hidden)}},
      {"layers", {double(a.layers), double(b.layers)}},
      {"heads", {double(a.heads), double(b.heads)}},
      {"kv_heads", {double(a.kv_heads), double(b.kv_heads)}},
      {"intermediate", {double(a.intermediate), double(b.intermediate)}},
      {"vocab", {double(a.vocab), double(b.vocab)}},
      {"max_seq", {double(a.max_seq), double(b.max_seq)}},
      {"rope_theta", {a.is_gpt2() ? 0.0 : a.rope_theta, b.is_gpt2() ? 0.0 : b.rope_theta}},
      {"norm_eps", {a.norm_eps, b.norm_eps}},
      {"tie_embeddings", {double(a.tie_embeddings), double(b.tie_embeddings)}},
      {"qkv_bias", {double(a.qkv_bias), double(b.qkv_bias)}}};
  for (const auto &[name, values] : fields)
    if (values.first != values.second)
      return format("%s = %g %s, %g %s", name, values.first, a_name, values.second, b_name);
  if (!a.is_gpt2() && !(a.features == b.features)) {  // the features, as config.json spells them
    json mine = hf_config(a, "float32", 0), theirs = hf_config(b, "float32", 0);
    if (mine.contains("text_config") && theirs.contains("text_config")) {  // an image-text family's language model
      mine = json(mine["text_config"]);
      theirs = json(theirs["text_config"]);
    }
    for (const auto &[key, value] : mine.items())
      if (!theirs.contains(key) || theirs[key] != value)
        return format("%s = %s %s, %s %s", key.c_str(), excerpt(value.dump(), 60).c_str(), a_name,
                      theirs.contains(key) ? excerpt(theirs[key].dump(), 60).c_str() : "(none)", b_name);
  }
  return "";
}

bool is_transformer_type(const std::string &type) { return type == "gpt2" || find_family(type) != nullptr; }

TransformerShape unchecked_shape_from_hf_config(const json &config, const std::string &source) {
  ZF_REQUIRE(config.is_object(), "%s: config.json is not a JSON object", source.c_str());
  std::string type = field<std::string>(config, "model_type", source);
  TransformerShape shape;
  if (type == "gpt2") {
    shape = gpt2_from_hf(config, source);
  } else if (const Family *family = find_family(type)) {
    read_decoder_config(config, source, *family, shape);
  } else {
    throw Error(format("%s: config.json has model_type \"%s\"; zfcore reads %s", source.c_str(),
                       excerpt(type).c_str(), family_names().c_str()));
  }
  return shape;
}

TransformerShape shape_from_hf_config(const json &config, const std::string &source) {
  TransformerShape shape = unchecked_shape_from_hf_config(config, source);
  shape.validate(source);
  return shape;
}

namespace {

// What of DIRECTORY/config.json the [model] table resolves besides the shape (HfModelConfig).
void read_dropout_and_padding(const json &c, HfModelConfig &read) {
  // An image-text checkpoint's language model has its keys (and its class's defaults) under text_config.
  const Family *family = find_family(read.shape.type);
  const json text = family && family->image_text() ? image_text_config(c, *family) : c;
  for (const char *key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"})
    if (text.contains(key) && text[key].is_number()) read.dropout = std::max(read.dropout, text[key].get<double>());
  if (read.shape.is_gpt2() || !text.contains("pad_token_id") || !text["pad_token_id"].is_number_integer()) return;
  const int64_t pad = text["pad_token_id"].get<int64_t>();
  if (pad >= 0 && pad < read.shape.vocab) read.padding_idx = pad;
}

}  // namespace

HfModelConfig read_hf_model_config(const std::string &directory) {
  std::string path = directory + "/config.json";
  // A link that leads out of the model's directory is not its file (the input rule, input.hpp).
  const std::string outside = path_inside_problem(directory, "config.json");
  ZF_REQUIRE(outside.empty(), "%s %s; zfcore reads a model's files only from inside its directory: copy the file there", path.c_str(),
             outside.c_str());
  std::string text;
  std::string why = read_regular_file(path, 16 << 20, &text);
  // A training checkpoint of zfcore (a step-N directory) is not a model directory: said what to do with it.
  ZF_REQUIRE(why.empty() || regular_file_problem(directory + "/checkpoint.json") != "",
             "%s is a zfcore training checkpoint, not a Hugging Face model directory (it has no config.json): "
             "continue its run with checkpoint.resume = \"%s\", or export its model (zfcore export %s OUT_DIR) and "
             "start from the export with model.init_from = OUT_DIR", directory.c_str(), directory.c_str(),
             directory.c_str());
  ZF_REQUIRE(why.empty(), "%s: cannot read: %s (is %s a Hugging Face checkpoint directory?)", path.c_str(),
             why.c_str(), directory.c_str());
  const json config = parse_json(text, path);
  HfModelConfig read;
  read.shape = shape_from_hf_config(config, path);
  read_dropout_and_padding(config, read);
  return read;
}

TransformerShape read_hf_config(const std::string &directory) { return read_hf_model_config(directory).shape; }

json hf_config(const TransformerShape &s, const std::string &dtype, double dropout) {
  json c;
  c["model_type"] = s.type;
  c["vocab_size"] = s.vocab;
  c["tie_word_embeddings"] = s.tie_embeddings;
  c["initializer_range"] = 0.02;
  c["torch_dtype"] = dtype;  // transformers 4 reads torch_dtype, 5 reads dtype
  c["dtype"] = dtype;
  if (s.is_gpt2()) {
    c["architectures"] = json::array({"GPT2LMHeadModel"});
    c["n_embd"] = s.hidden;
    c["n_layer"] = s.layers;
    c["n_head"] = s.heads;
    c["n_inner"] = s.intermediate;
    c["n_positions"] = s.max_seq;
    c["n_ctx"] = s.max_seq;
    c["activation_function"] = "gelu_new";
    c["layer_norm_epsilon"] = s.norm_eps;
    c["resid_pdrop"] = c["embd_pdrop"] = c["attn_pdrop"] = dropout;
    c["scale_attn_weights"] = true;
    // GPT-2's <|endoftext|>, where the vocabulary has it (transformers defaults to 50256 otherwise).
    c["bos_token_id"] = c["eos_token_id"] = s.vocab > 50256 ? json(50256) : json(nullptr);
    return c;
  }
  c["attention_dropout"] = dropout;
  write_decoder_config(s, *find_family(s.type), c);
  return c;
}

}  // namespace zf
