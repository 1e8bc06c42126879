#include "model/transformer_shape.hpp"

#include "config/limits.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <map>
#include <type_traits>

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

TransformerShape llama_preset(const char *type, int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads,
                              int64_t kv_heads, int64_t vocab, int64_t max_seq, double theta, double eps, bool tie) {
  TransformerShape s;
  s.type = type;
  s.hidden = hidden;
  s.intermediate = intermediate;
  s.layers = layers;
  s.heads = heads;
  s.kv_heads = kv_heads;
  s.vocab = vocab;
  s.max_seq = max_seq;
  s.rope_theta = theta;
  s.norm_eps = eps;
  s.tie_embeddings = tie;
  s.qkv_bias = s.type == "qwen2";
  return s;
}

// The published shapes (the config.json of each model on the Hugging Face hub).
const std::map<std::string, TransformerShape> &presets() {
  static const std::map<std::string, TransformerShape> table = {
      {"gpt2", gpt2_preset(768, 12, 12)},
      {"gpt2-medium", gpt2_preset(1024, 24, 16)},
      {"gpt2-large", gpt2_preset(1280, 36, 20)},
      {"gpt2-xl", gpt2_preset(1600, 48, 25)},
      {"llama2-7b", llama_preset("llama", 4096, 11008, 32, 32, 32, 32000, 4096, 1e4, 1e-5, false)},
      {"llama2-13b", llama_preset("llama", 5120, 13824, 40, 40, 40, 32000, 4096, 1e4, 1e-5, false)},
      {"llama2-70b", llama_preset("llama", 8192, 28672, 80, 64, 8, 32000, 4096, 1e4, 1e-5, false)},
      {"qwen2-1.5b", llama_preset("qwen2", 1536, 8960, 28, 12, 2, 151936, 131072, 1e6, 1e-6, true)},
      {"qwen2.5-0.5b", llama_preset("qwen2", 896, 4864, 24, 14, 2, 151936, 32768, 1e6, 1e-6, true)},
      {"qwen2.5-1.5b", llama_preset("qwen2", 1536, 8960, 28, 12, 2, 151936, 131072, 1e6, 1e-6, true)},
      {"qwen2.5-3b", llama_preset("qwen2", 2048, 11008, 36, 16, 2, 151936, 32768, 1e6, 1e-6, true)},
      {"qwen2.5-7b", llama_preset("qwen2", 3584, 18944, 28, 28, 4, 152064, 131072, 1e6, 1e-6, false)},
      {"qwen2.5-14b", llama_preset("qwen2", 5120, 13824, 48, 40, 8, 152064, 131072, 1e6, 1e-5, false)},
      {"qwen2.5-32b", llama_preset("qwen2", 5120, 27648, 64, 40, 8, 152064, 131072, 1e6, 1e-5, false)},
  };
  return table;
}

// ---- config.json field access with messages that name the file and the field ----

template <class T>
T field(const json &config, const char *key, const std::string &source) {
  ZF_REQUIRE(config.contains(key) && !config[key].is_null(), "%s: config.json has no \"%s\"", source.c_str(), key);
  // A count must be written as one: json's conversion would cut 32.5 to 32 without a word.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const double value = config[key].is_number_float() ? config[key].get<double>() : 0.0;
    ZF_REQUIRE(value == std::floor(value) && std::fabs(value) < 9e15,
               "%s: config.json field \"%s\" = %s must be a whole number", source.c_str(), key,
               excerpt(config[key].dump()).c_str());
  }
  try {
    return config[key].get<T>();
  } catch (const json::exception &) {
    throw Error(format("%s: config.json field \"%s\" = %s has the wrong type", source.c_str(), key,
                       excerpt(config[key].dump()).c_str()));
  }
}

template <class T>
T field_or(const json &config, const char *key, T fallback, const std::string &source) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  return field<T>(config, key, source);
}

void require_default(const json &config, const char *key, const json &expected, const std::string &source,
                     const char *why) {
  if (!config.contains(key) || config[key].is_null() || config[key] == expected) return;
  throw Error(format("%s: config.json has \"%s\": %s, which zfcore does not support (%s)", source.c_str(), key,
                     excerpt(config[key].dump()).c_str(), why));
}

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

TransformerShape llama_from_hf(const json &c, const std::string &source, const std::string &type) {
  TransformerShape s;
  s.type = type;
  s.hidden = field<int64_t>(c, "hidden_size", source);
  s.intermediate = field<int64_t>(c, "intermediate_size", source);
  s.layers = field<int64_t>(c, "num_hidden_layers", source);
  s.heads = field<int64_t>(c, "num_attention_heads", source);
  s.kv_heads = field_or<int64_t>(c, "num_key_value_heads", s.heads, source);
  s.vocab = field<int64_t>(c, "vocab_size", source);
  s.max_seq = field_or<int64_t>(c, "max_position_embeddings", type == "qwen2" ? 32768 : 2048, source);
  s.norm_eps = field_or<double>(c, "rms_norm_eps", 1e-6, source);
  s.tie_embeddings = field_or<bool>(c, "tie_word_embeddings", false, source);
  s.qkv_bias = type == "qwen2";
  // transformers 5 moved rope_theta into rope_parameters; both spellings are read.
  s.rope_theta = field_or<double>(c, "rope_theta", 10000.0, source);
  for (const char *key : {"rope_parameters", "rope_scaling"}) {
    if (!c.contains(key) || c[key].is_null()) continue;
    const json &rope = c[key];
    ZF_REQUIRE(rope.is_object(), "%s: config.json field \"%s\" = %s must be an object like {\"rope_type\": \"default\"}",
               source.c_str(), key, excerpt(rope.dump()).c_str());
    std::string rope_type = field_or<std::string>(rope, "rope_type", field_or<std::string>(rope, "type", "default", source), source);
    ZF_REQUIRE(rope_type == "default", "%s: config.json has \"%s\" of type \"%s\"; only plain RoPE is supported",
               source.c_str(), key, excerpt(rope_type).c_str());
    if (rope.contains("rope_theta")) s.rope_theta = field<double>(rope, "rope_theta", source);
  }
  if (c.contains("head_dim") && !c["head_dim"].is_null() && s.heads > 0)
    ZF_REQUIRE(field<int64_t>(c, "head_dim", source) == s.hidden / s.heads,
               "%s: config.json has \"head_dim\": %lld, but zfcore needs head_dim = hidden_size / "
               "num_attention_heads = %lld",
               source.c_str(), (long long)field<int64_t>(c, "head_dim", source), (long long)(s.hidden / s.heads));
  std::string activation = field_or<std::string>(c, "hidden_act", "silu", source);
  ZF_REQUIRE(activation == "silu", "%s: config.json has \"hidden_act\": \"%s\"; zfcore's SwiGLU MLP uses silu",
             source.c_str(), excerpt(activation).c_str());
  require_default(c, "attention_bias", false, source, "Llama attention has no biases; Qwen2 is model_type qwen2");
  require_default(c, "mlp_bias", false, source, "the MLP has no biases");
  require_default(c, "use_sliding_window", false, source, "attention is full causal");
  if (c.contains("layer_types") && c["layer_types"].is_array())
    for (const json &kind : c["layer_types"])
      ZF_REQUIRE(kind == "full_attention", "%s: config.json has a layer of type %s; zfcore supports full_attention only",
                 source.c_str(), kind.dump().c_str());
  return s;
}

}  // namespace

uint64_t TransformerShape::parameter_count() const {
  uint64_t h = uint64_t(hidden), l = uint64_t(layers), v = uint64_t(vocab), i = uint64_t(intermediate);
  uint64_t embeddings = v * h, head = tie_embeddings ? 0 : v * h;
  if (is_gpt2()) {
    uint64_t per_layer = 2 * h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + (i * h + i) + (h * i + h);
    return embeddings + uint64_t(max_seq) * h + l * per_layer + 2 * h + head;
  }
  uint64_t q = uint64_t(heads * head_dim()), kv = uint64_t(kv_heads * head_dim());
  uint64_t attention = h * q + 2 * h * kv + q * h + (qkv_bias ? q + 2 * kv : 0);
  uint64_t per_layer = attention + 3 * h * i + 2 * h;
  return embeddings + l * per_layer + h + head;
}

void TransformerShape::validate(const std::string &source) const {
  const char *where = source.c_str();
  ZF_REQUIRE(is_transformer_type(type), "%s: model type \"%s\" is not one of gpt2, llama, qwen2", where, type.c_str());
  for (auto [key, value] : {std::pair<const char *, int64_t>{"hidden", hidden}, {"layers", layers},
                            {"heads", heads}, {"kv_heads", kv_heads}, {"intermediate", intermediate},
                            {"vocab", vocab}, {"max_seq", max_seq}})
  {
    ZF_REQUIRE(value > 0, "%s: model.%s = %lld must be > 0", where, key, (long long)value);
    for (const zf_param_decl &decl : model_schema())
      ZF_REQUIRE(std::string(decl.key) != key || !(decl.flags & ZF_PARAM_HAS_MAX) || double(value) <= decl.max,
                 "%s: model.%s = %lld must be <= %.0f", where, key, (long long)value, decl.max);
  }
  ZF_REQUIRE(hidden % heads == 0, "%s: model.hidden = %lld is not divisible by model.heads = %lld", where,
             (long long)hidden, (long long)heads);
  ZF_REQUIRE(heads % kv_heads == 0, "%s: model.heads = %lld is not divisible by model.kv_heads = %lld", where,
             (long long)heads, (long long)kv_heads);
  ZF_REQUIRE(norm_eps > 0, "%s: model.norm_eps must be > 0", where);
  if (is_gpt2()) {
    ZF_REQUIRE(kv_heads == heads, "%s: GPT-2 has no grouped-query attention: model.kv_heads must equal heads (%lld)",
               where, (long long)heads);
    ZF_REQUIRE(qkv_bias, "%s: GPT-2 always has attention biases: remove model.qkv_bias = false", where);
  } else {
    ZF_REQUIRE(head_dim() % 2 == 0, "%s: RoPE needs an even head size, but hidden / heads = %lld", where,
               (long long)head_dim());
    ZF_REQUIRE(rope_theta > 0, "%s: model.rope_theta must be > 0", where);
    ZF_REQUIRE(qkv_bias == (type == "qwen2"),
               "%s: model.qkv_bias = %s does not fit type \"%s\" (Qwen2 has q/k/v biases, Llama has none: "
               "use type = \"%s\")",
               where, qkv_bias ? "true" : "false", type.c_str(), qkv_bias ? "qwen2" : "llama");
  }
}

bool TransformerShape::operator==(const TransformerShape &o) const {
  return type == o.type && hidden == o.hidden && layers == o.layers && heads == o.heads && kv_heads == o.kv_heads &&
         intermediate == o.intermediate && vocab == o.vocab && max_seq == o.max_seq &&
         (is_gpt2() || rope_theta == o.rope_theta) &&  // GPT-2 has no RoPE
         norm_eps == o.norm_eps && tie_embeddings == o.tie_embeddings && qkv_bias == o.qkv_bias;
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
  return "";
}

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

bool is_transformer_type(const std::string &type) { return type == "gpt2" || type == "llama" || type == "qwen2"; }

TransformerShape shape_from_hf_config(const json &config, const std::string &source) {
  ZF_REQUIRE(config.is_object(), "%s: config.json is not a JSON object", source.c_str());
  std::string type = field<std::string>(config, "model_type", source);
  TransformerShape shape;
  if (type == "gpt2")
    shape = gpt2_from_hf(config, source);
  else if (type == "llama" || type == "qwen2")
    shape = llama_from_hf(config, source, type);
  else
    throw Error(format("%s: config.json has model_type \"%s\"; zfcore reads gpt2, llama and qwen2", source.c_str(),
                       excerpt(type).c_str()));
  shape.validate(source);
  return shape;
}

TransformerShape read_hf_config(const std::string &directory) {
  std::string path = directory + "/config.json";
  std::string text;
  // A link that leads out of the model's directory is not its file (the input rule, input.hpp).
  const std::string outside = path_inside_problem(directory, "config.json");
  ZF_REQUIRE(outside.empty(), "%s %s; zfcore reads a model's files only from inside its directory: copy the file there", path.c_str(),
             outside.c_str());
  std::string why = read_regular_file(path, 16 << 20, &text);
  // A training checkpoint of zfcore (a step-N directory) is not a model directory: said what to do with it.
  ZF_REQUIRE(why.empty() || regular_file_problem(directory + "/checkpoint.json") != "",
             "%s is a zfcore training checkpoint, not a Hugging Face model directory (it has no config.json): "
             "continue its run with checkpoint.resume = \"%s\", or export its model (zfcore export %s OUT_DIR) and "
             "start from the export with model.init_from = OUT_DIR", directory.c_str(), directory.c_str(),
             directory.c_str());
  ZF_REQUIRE(why.empty(), "%s: cannot read: %s (is %s a Hugging Face checkpoint directory?)", path.c_str(),
             why.c_str(), directory.c_str());
  return shape_from_hf_config(parse_json(text, path), path);
}

double read_hf_dropout(const std::string &directory) {
  std::string path = directory + "/config.json", text;
  if (!read_regular_file(path, 16 << 20, &text).empty()) return 0;  // read_hf_config says why
  json config = parse_json(text, path);
  double dropout = 0;
  for (const char *key : {"resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout"})
    if (config.is_object() && config.contains(key) && config[key].is_number())
      dropout = std::max(dropout, config[key].get<double>());
  return dropout;
}

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
  c["architectures"] = json::array({s.type == "qwen2" ? "Qwen2ForCausalLM" : "LlamaForCausalLM"});
  c["hidden_size"] = s.hidden;
  c["intermediate_size"] = s.intermediate;
  c["num_hidden_layers"] = s.layers;
  c["num_attention_heads"] = s.heads;
  c["num_key_value_heads"] = s.kv_heads;
  c["head_dim"] = s.head_dim();
  c["max_position_embeddings"] = s.max_seq;
  c["rms_norm_eps"] = s.norm_eps;
  c["rope_theta"] = s.rope_theta;
  c["rope_scaling"] = nullptr;
  c["hidden_act"] = "silu";
  c["attention_dropout"] = dropout;
  if (s.type == "qwen2") {
    c["use_sliding_window"] = false;
    c["sliding_window"] = s.max_seq;
    c["max_window_layers"] = s.layers;
  } else {
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  }
  return c;
}

}  // namespace zf
