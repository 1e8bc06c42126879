// checkpoint_model.cpp: the model a checkpoint's weights were trained as (checkpoint_model.hpp).
#include "engine/checkpoint_model.hpp"

#include "checkpoint/checkpoint.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <set>

namespace zf {

std::vector<std::pair<std::string, std::string>> model_record(const RunConfig &config) {
  auto number = [](double value) { return format("%.10g", value); };
  // (A transformer first: with init_from and no type written, model.type reads as its default, linear_stack.)
  if (!is_transformer_config(config) && config.string("model", "type") == "linear_stack")
    return {{"type", "linear_stack"},  // its keys are its shapes: named, not a digest
            {"hidden", number(double(config.integer("model", "hidden")))},
            {"layers", number(double(config.integer("model", "layers")))}};
  if (!is_transformer_config(config)) return {};
  const TransformerShape s = transformer_options(config).shape;
  std::vector<std::pair<std::string, std::string>> record = {
      {"type", s.type},           {"hidden", number(double(s.hidden))}, {"layers", number(double(s.layers))},
      {"heads", number(double(s.heads))}, {"kv_heads", number(double(s.kv_heads))},
      {"intermediate", number(double(s.intermediate))}, {"vocab", number(double(s.vocab))},
      {"max_seq", number(double(s.max_seq))}, {"norm_eps", number(s.norm_eps)},
      {"tie_embeddings", s.tie_embeddings ? "true" : "false"}, {"qkv_bias", s.qkv_bias ? "true" : "false"}};
  if (s.is_gpt2()) return record;  // GPT-2 has no RoPE, nor features
  record.emplace_back("rope_theta", number(s.rope_theta));
  // The layer's composition (decoder_features.hpp) as config.json spells it, recorded as "config.KEY":
  // another sliding window, RoPE scaling or norm keeps every shape and would silently compute another model.
  nlohmann::json config_json = hf_config(s, "float32", 0);
  if (config_json.contains("text_config")) config_json = nlohmann::json(config_json["text_config"]);
  static const std::set<std::string> recorded_above = {
      "model_type", "architectures", "vocab_size", "tie_word_embeddings", "initializer_range", "dtype", "torch_dtype",
      "attention_dropout", "pad_token_id", "hidden_size", "intermediate_size", "num_hidden_layers",
      "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps"};
  for (const auto &[key, value] : config_json.items())
    if (!recorded_above.count(key)) record.emplace_back("config." + key, value.dump());
  return record;
}

std::vector<std::pair<std::string, std::string>> recorded_model(const std::filesystem::path &checkpoint) {
  std::vector<std::pair<std::string, std::string>> record;
  const std::string path = (checkpoint / "checkpoint.json").string();
  std::string text;
  // An edited or damaged record is not trusted (the checkpoint's damage check says what is wrong).
  if (!checkpoint_record_problem(checkpoint).empty() || !read_regular_file(path, 1 << 20, &text).empty()) return record;
  try {
    const nlohmann::json info = parse_json(text, path);
    if (!info.is_object() || !info.contains("model") || !info["model"].is_object()) return record;
    for (const auto &[key, value] : info["model"].items())
      if (value.is_string()) record.emplace_back(key, value.get<std::string>());
  } catch (const Error &) {
  }
  return record;
}

void check_same_model(const std::filesystem::path &checkpoint, const RunConfig &config, const std::string &use) {
  const auto recorded = recorded_model(checkpoint);
  if (recorded.empty()) return;  // an older zfcore's checkpoint: the layout digest is all there is
  const auto mine = model_record(config);
  // An older zfcore recorded a model given by init_from alone as linear_stack: the digest is all there is.
  if (!recorded.empty() && recorded.front() == std::make_pair(std::string("type"), std::string("linear_stack")) &&
      !mine.empty() && mine.front().second != "linear_stack")
    return;
  std::string differing, settings;
  const std::string init_from = config.string("model", "init_from");
  for (const auto &[key, value] : recorded) {
    std::string here = "(none: another model type)";
    for (const auto &[my_key, my_value] : mine)
      if (my_key == key) here = my_value;
    if (here == value) continue;
    const char *separator = differing.empty() ? "" : "; ";
    if (key.rfind("config.", 0) == 0) {  // a feature, which init_from's config.json (or the family) gives
      // Named down to the first differing entry of an object ("rope_parameters.sliding_attention.rope_theta").
      std::string name = key.substr(7), theirs = value, ours = here;
      if (nlohmann::json::accept(theirs) && nlohmann::json::accept(ours)) {
        nlohmann::json a = nlohmann::json::parse(theirs), b = nlohmann::json::parse(ours);
        while (a.is_object() && b.is_object() && a != b) {
          std::string first;
          for (const auto &[k, v] : a.items())
            if (first.empty() && (!b.contains(k) || b[k] != v)) first = k;
          for (const auto &[k, v] : b.items())
            if (first.empty() && !a.contains(k)) first = k;
          name += "." + first;
          a = nlohmann::json(a.value(first, nlohmann::json())), b = nlohmann::json(b.value(first, nlohmann::json()));
        }
        theirs = a.dump(), ours = b.dump();
      }
      differing += format("%sconfig.json's %s = %s in the checkpoint, %s in this config's model (%s)", separator,
                          name.c_str(), excerpt(theirs, 60).c_str(), excerpt(ours, 60).c_str(),
                          init_from.empty() ? config.where("model", "type").str().c_str()
                                            : (init_from + "/config.json").c_str());
      continue;
    }
    differing += format("%smodel.%s = %s in the checkpoint, %s in this config (%s)", separator, key.c_str(),
                        excerpt(value, 40).c_str(), excerpt(here, 40).c_str(), config.where("model", key).str().c_str());
    settings += format(" --set model.%s=%s", key.c_str(), excerpt(value, 40).c_str());
  }
  ZF_REQUIRE(differing.empty(),
             "%s was trained as another model than this config's: %s. Its weights mean that model only (a key such as "
             "heads or norm_eps keeps every shape and would silently compute another). To %s it, set them back to "
             "the checkpoint's values%s%s%s; to "
             "train a model of this config from its weights, export it with its own config (zfcore export), then "
             "start from the export with model.init_from and checkpoint.resume = \"never\"",
             checkpoint.c_str(), differing.c_str(), use.c_str(), settings.empty() ? "" : " (e.g.", settings.c_str(),
             settings.empty() ? " (model.init_from's config.json as the checkpoint was trained from)" : ")");
}

}  // namespace zf
