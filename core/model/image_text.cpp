// The image-text checkpoints of a family (Gemma3ForConditionalGeneration, Qwen3_5ForConditionalGeneration):
// config.json nests the language model's keys under text_config, and its weights under a prefix
// (family.hpp). zfcore reads and trains the language model; the vision tower is neither built nor
// trained, and text-only positions make Qwen3.5's M-RoPE the 1-D RoPE it computes (qwen3_5.cpp).
// Every such family (Gemma 3, Gemma 4, Qwen3.5, Qwen3.5-MoE) is its text family through image_text_of.
#include "model/family.hpp"
#include "model/hf_config_fields.hpp"

namespace zf {

using json = nlohmann::json;

Family image_text_of(const Family &text, const std::string &type, const std::string &architecture,
                     const std::string &text_prefix, const std::string &head_name, json text_defaults) {
  Family f = text;
  f.type = type;
  f.architecture = architecture;
  f.text_type = text.type;
  f.text_prefix = text_prefix;
  f.head_name = head_name;
  f.text_defaults = std::move(text_defaults);
  f.defaults = nullptr;
  f.read = nullptr;
  f.write = nullptr;
  return f;
}

json image_text_config(const json &c, const Family &family) {
  json text = family.text_defaults.is_object() ? family.text_defaults : json::object();
  if (c.contains("text_config") && c["text_config"].is_object())
    for (const auto &[key, value] : c["text_config"].items()) text[key] = value;
  return text;
}

void read_image_text_config(const json &c, const std::string &source, const Family &family, TransformerShape &s) {
  ZF_REQUIRE(c.contains("text_config") && c["text_config"].is_object(),
             "%s: config.json of model_type \"%s\" has no text_config object (the keys of its language model)",
             source.c_str(), family.type.c_str());
  const Family *text_family = find_family(family.text_type);
  ZF_REQUIRE(text_family, "internal: family %s names the unknown text family %s", family.type.c_str(),
             family.text_type.c_str());
  const json text = image_text_config(c, family);
  const std::string where = source + " (text_config)";
  const std::string type = field_or<std::string>(text, "model_type", text_family->type, where);
  ZF_REQUIRE(type == text_family->type,
             "%s: config.json's text_config has model_type \"%s\", but the language model of a %s checkpoint is "
             "%s", source.c_str(), excerpt(type).c_str(), family.type.c_str(), text_family->type.c_str());
  read_decoder_config(text, where, *text_family, s);
  s.type = family.type;
  // transformers ties the head by the outer config's key (the conditional-generation model's).
  s.tie_embeddings = field_or<bool>(c, "tie_word_embeddings", family.default_tie, source);
  if (family.read) family.read(c, source, s);  // where the image-text class computes otherwise
}

void write_image_text_config(const TransformerShape &s, const Family &family, json &c) {
  json text = c;
  text["model_type"] = family.text_type;
  write_decoder_config(s, *find_family(family.text_type), text);
  text.erase("architectures");
  for (const char *key : {"dtype", "torch_dtype"}) text.erase(key);
  c = json{{"model_type", family.type},
           {"architectures", json::array({family.architecture})},
           {"tie_word_embeddings", s.tie_embeddings},
           {"dtype", c["dtype"]},
           {"torch_dtype", c["torch_dtype"]},
           {"text_config", text}};
}

std::vector<std::string> hf_tensor_names(const std::string &type, const std::string &name) {
  const Family *family = find_family(type);
  if (!family || !family->image_text()) return {name};
  // transformers 5 writes Gemma 3's language model as language_model.model.*, Qwen3.5's as
  // model.language_model.*, and reads either.
  if (name == "lm_head.weight") return {family->head_name, "lm_head.weight", "language_model.lm_head.weight"};
  if (name.rfind("model.", 0) != 0) return {name};
  const std::string rest = name.substr(6);
  return {family->text_prefix + rest, "model.language_model." + rest, "language_model.model." + rest};
}

}  // namespace zf
