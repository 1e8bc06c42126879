// Resolution of the [model] table into a transformer shape: preset, then init_from's config.json,
// then explicit keys. A key the user wrote always wins over a preset; config.json is the truth
// about a checkpoint, so an explicit key that contradicts it is an error rather than an override.
#include "model/transformer_shape.hpp"

#include "config/config.hpp"
#include "model/family.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <algorithm>
#include <set>
#include <cmath>

namespace zf {
namespace {

struct ShapeKeys {
  std::vector<std::pair<const char *, int64_t TransformerShape::*>> integers = {
      {"hidden", &TransformerShape::hidden},     {"layers", &TransformerShape::layers},
      {"heads", &TransformerShape::heads},       {"kv_heads", &TransformerShape::kv_heads},
      {"intermediate", &TransformerShape::intermediate}, {"vocab", &TransformerShape::vocab},
      {"max_seq", &TransformerShape::max_seq}};
  std::vector<std::pair<const char *, double TransformerShape::*>> reals = {
      {"rope_theta", &TransformerShape::rope_theta}, {"norm_eps", &TransformerShape::norm_eps}};
  std::vector<std::pair<const char *, bool TransformerShape::*>> booleans = {
      {"tie_embeddings", &TransformerShape::tie_embeddings}, {"qkv_bias", &TransformerShape::qkv_bias}};
};

// The shape of a model given only by its type: hidden and layers from the table (their schema
// defaults make a tiny model), the rest filled by fill_family_defaults.
TransformerShape family_shape(const std::string &type, const RunConfig &config) {
  TransformerShape s;
  s.type = type;
  s.hidden = config.integer("model", "hidden");
  s.layers = config.integer("model", "layers");
  const Family *family = find_family(type);  // tied as transformers' config of the family ties it by default
  s.tie_embeddings = type == "gpt2" || (family && family->default_tie);
  s.qkv_bias = type == "gpt2" || type == "qwen2";
  return s;
}

// Fields still 0 after preset, config.json and explicit keys get the family's conventions; a model
// given by type alone (`type_only`) also gets the family's composition (family.hpp).
void fill_family_defaults(TransformerShape &s, bool type_only) {
  const bool gpt2 = s.is_gpt2();
  if (s.heads == 0) s.heads = std::max<int64_t>(1, s.hidden / 64);
  if (s.kv_heads == 0) s.kv_heads = s.heads;
  if (s.intermediate == 0)  // GPT-2: 4h; the others: 8h/3 rounded up to a multiple of 256
    s.intermediate = gpt2 ? 4 * s.hidden : (8 * s.hidden / 3 + 255) / 256 * 256;
  if (gpt2) {
    if (s.vocab == 0) s.vocab = 50257;
    if (s.max_seq == 0) s.max_seq = 1024;
    if (s.norm_eps == 0) s.norm_eps = 1e-5;
    return;
  }
  const Family *family = find_family(s.type);
  if (!family) return;  // validate() names the type
  if (s.vocab == 0) s.vocab = family->default_vocab;
  if (s.max_seq == 0) s.max_seq = family->default_max_seq;
  if (s.rope_theta == 0) s.rope_theta = family->default_theta;
  if (s.norm_eps == 0) s.norm_eps = family->default_norm_eps;
  if (type_only && family->defaults) family->defaults(s);
}

std::string number(double value) { return format("%g", value); }

}  // namespace

bool is_transformer_config(const RunConfig &config) {
  std::string type = config.string("model", "type");
  bool type_written = config.core("model").values().count("type") != 0;
  // A preset or an init_from directory names the architecture when type is left out.
  return is_transformer_type(type) || (!type_written && (!config.string("model", "preset").empty() ||
                                                         !config.string("model", "init_from").empty()));
}

TransformerOptions transformer_options(const RunConfig &config) {
  const auto &written = config.core("model").values();
  auto wrote = [&](const char *key) { return written.count(key) != 0; };
  auto at = [&](const char *key) { return config.where("model", key).str(); };

  TransformerOptions options;
  options.dtype = config.string("model", "dtype");
  options.dropout = config.real("model", "dropout");
  options.activation_checkpointing = config.boolean("model", "activation_checkpointing");
  const std::string fused = config.string("model", "fused");
  options.fused = fused == "false" ? FusedKernels::off : fused == "always" ? FusedKernels::always : FusedKernels::gpu;
  options.init_from = config.string("model", "init_from");
  ZF_REQUIRE(!(options.activation_checkpointing && options.dropout > 0),
             "%s: model.activation_checkpointing = true needs model.dropout = 0 (the recomputed forward would "
             "draw other dropout masks)",
             at("activation_checkpointing").c_str());

  std::string type = config.string("model", "type");
  std::string preset = config.string("model", "preset");
  TransformerShape shape;
  if (!preset.empty()) {
    auto found = find_preset(preset);
    if (!found) {
      std::string names, hint = suggest(preset, preset_names());
      for (const std::string &name : preset_names()) names += (names.empty() ? "" : ", ") + name;
      throw Error(format("%s: model.preset = \"%s\" is not a preset (%s)%s%s", at("preset").c_str(), preset.c_str(),
                         names.c_str(), hint.empty() ? "" : "; ", hint.c_str()));
    }
    ZF_REQUIRE(!wrote("type") || type == found->type,
               "%s: model.type = \"%s\" but preset \"%s\" is a %s model: remove one of the two", at("type").c_str(),
               type.c_str(), preset.c_str(), found->type.c_str());
    shape = *found;
  } else if (options.init_from.empty() || wrote("type")) {
    ZF_REQUIRE(is_transformer_type(type), "%s: model.type = \"%s\" is not a transformer (%s)",
               at("type").c_str(), type.c_str(), family_names().c_str());
    const Family *family = find_family(type);
    ZF_REQUIRE(!family || !family->image_text() || !options.init_from.empty(),
               "%s: model.type = \"%s\" is an image-text checkpoint (%s), which zfcore reads only from model.init_from "
               "(it builds no vision tower): set model.init_from to such a checkpoint, or use type = \"%s\" for its "
               "language model alone", at("type").c_str(), type.c_str(), family->architecture.c_str(),
               family ? family->text_type.c_str() : "");
    shape = family_shape(type, config);
  }

  ShapeKeys keys;
  if (!options.init_from.empty()) {
    std::string source = options.init_from + "/config.json";
    const HfModelConfig read = read_hf_model_config(options.init_from);
    const TransformerShape &stored = read.shape;
    ZF_REQUIRE(!wrote("type") || type == stored.type,
               "%s: model.type = \"%s\" but %s is a %s model (model_type): fix or remove model.type",
               at("type").c_str(), type.c_str(), source.c_str(), stored.type.c_str());
    // A RoPE model's context length is no part of its weights: a preset may differ there.
    TransformerShape comparable = shape;
    if (!preset.empty() && !stored.is_gpt2()) comparable.max_seq = stored.max_seq;
    ZF_REQUIRE(preset.empty() || comparable == stored,
               "%s: model.preset = \"%s\" does not match the shape in %s (%s): remove model.preset "
               "(init_from's config.json gives the shape)",
               at("preset").c_str(), preset.c_str(), source.c_str(),
               shape_difference(comparable, stored, "in the preset", "in config.json").c_str());
    auto mismatch = [&](const char *key, const std::string &mine, const std::string &theirs) {
      throw Error(format("%s: model.%s = %s, but %s says %s: config.json gives the shape, so remove model.%s "
                         "or point init_from elsewhere",
                         at(key).c_str(), key, mine.c_str(), source.c_str(), theirs.c_str(), key));
    };
    for (auto [key, member] : keys.integers) {
      int64_t value = config.integer("model", key);
      if (wrote(key) && value != 0 && value != stored.*member)
        mismatch(key, std::to_string(value), std::to_string(stored.*member));
    }
    for (auto [key, member] : keys.reals) {
      double value = config.real("model", key);
      if (wrote(key) && value != 0 && value != stored.*member) mismatch(key, number(value), number(stored.*member));
    }
    for (auto [key, member] : keys.booleans) {
      bool value = config.boolean("model", key);
      if (wrote(key) && value != stored.*member)
        mismatch(key, value ? "true" : "false", stored.*member ? "true" : "false");
    }
    shape = stored;
    options.padding_idx = read.padding_idx;
    // Hugging Face trains with config.json's dropout; zfcore with model.dropout: say which.
    const double stored_dropout = read.dropout;
    // Once per process: a run reads its model's shape twice (its checks before setup, then setup).
    static std::set<std::string> said;
    if (!wrote("dropout") && stored_dropout > 0 && said.insert(source).second)
      log_info(format("%s has dropout %g; this run trains without dropout (model.dropout = 0): set model.dropout = "
                      "%g to train with it%s", source.c_str(), stored_dropout, stored_dropout,
                      options.activation_checkpointing ? " (and model.activation_checkpointing = false)" : ""));
  } else {
    for (auto [key, member] : keys.integers)
      if (wrote(key) && config.integer("model", key) != 0) shape.*member = config.integer("model", key);
    for (auto [key, member] : keys.reals)
      if (wrote(key) && config.real("model", key) != 0) shape.*member = config.real("model", key);
    for (auto [key, member] : keys.booleans)
      if (wrote(key)) shape.*member = config.boolean("model", key);
  }
  fill_family_defaults(shape, preset.empty() && options.init_from.empty());
  // Where the shape comes from: the file's [model], and the --set values that changed it, named as typed.
  std::string sets;
  for (const auto &[key, value] : written)
    if (config.where("model", key).file == "--set")
      sets += (sets.empty() ? " with --set " : ", --set ") + config.where("model", key).text;
  shape.validate(config.file() + " [model]" + sets);
  options.shape = shape;
  options.checkpoint_layers = config.integer("model", "checkpoint_layers");
  ZF_REQUIRE(options.checkpoint_layers == 0 || options.activation_checkpointing,
             "%s: model.checkpoint_layers = %lld chooses which layers activation checkpointing recomputes: set "
             "model.activation_checkpointing = true, or remove model.checkpoint_layers",
             at("checkpoint_layers").c_str(), (long long)options.checkpoint_layers);
  ZF_REQUIRE(options.checkpoint_layers <= shape.layers,
             "%s: model.checkpoint_layers = %lld, but the model has %lld layers: use 1 to %lld, or 0 for all",
             at("checkpoint_layers").c_str(), (long long)options.checkpoint_layers, (long long)shape.layers,
             (long long)shape.layers);
  return options;
}

}  // namespace zf
