// checkpoint_model.cpp: the model a checkpoint's weights were trained as (checkpoint_model.hpp).
#include "engine/checkpoint_model.hpp"

#include "checkpoint/checkpoint.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

namespace zf {

std::vector<std::pair<std::string, std::string>> model_record(const RunConfig &config) {
  auto number = [](double value) { return format("%.10g", value); };
  if (config.string("model", "type") == "linear_stack")  // its keys are its shapes: named, not a digest
    return {{"type", "linear_stack"},
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
  if (!s.is_gpt2()) record.emplace_back("rope_theta", number(s.rope_theta));  // GPT-2 has no RoPE
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
  std::string differing, settings;
  for (const auto &[key, value] : recorded) {
    std::string here = "(none: another model type)";
    for (const auto &[my_key, my_value] : mine)
      if (my_key == key) here = my_value;
    if (here == value) continue;
    differing += format("%smodel.%s = %s in the checkpoint, %s in this config (%s)", differing.empty() ? "" : "; ",
                        key.c_str(), excerpt(value, 40).c_str(), excerpt(here, 40).c_str(),
                        config.where("model", key).str().c_str());
    settings += format(" --set model.%s=%s", key.c_str(), excerpt(value, 40).c_str());
  }
  ZF_REQUIRE(differing.empty(),
             "%s was trained as another model than this config's: %s. Its weights mean that model only (a key such as "
             "heads or norm_eps keeps every shape and would silently compute another). To %s it, set them back to "
             "the checkpoint's values (e.g.%s); to "
             "train a model of this config from its weights, export it with its own config (zfcore export), then "
             "start from the export with model.init_from and checkpoint.resume = \"never\"",
             checkpoint.c_str(), differing.c_str(), use.c_str(), settings.c_str());
}

}  // namespace zf
