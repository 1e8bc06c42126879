// family.hpp: a model family of the Llama lineage, as one small file of model/families/ declares it:
// which Hugging Face model_type it reads, how its config.json sets the layer's composition
// (decoder_features.hpp), how it writes that back for an export, and its conventions for a model
// given only by type. Adding a family is adding a file there and one line to families/list.cpp.
#pragma once

#include "model/transformer_shape.hpp"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace zf {

struct Family {
  std::string type;          // Hugging Face model_type ("qwen3")
  std::string architecture;  // its causal-LM class ("Qwen3ForCausalLM")
  // config.json's family keys into `s`, after read_decoder_config has read the common ones. A key
  // whose value zfcore cannot compute is an error that names it (hf_config_fields.hpp).
  void (*read)(const nlohmann::json &config, const std::string &source, TransformerShape &s) = nullptr;
  // The family's keys of config.json, after write_decoder_config has written the common ones.
  void (*write)(const TransformerShape &s, nlohmann::json &config) = nullptr;
  // A model given by type and sizes only: the family's conventions for what the config left at 0.
  void (*defaults)(TransformerShape &s) = nullptr;
  bool layer_types = false;       // its config.json lists layer_types (full_attention / sliding_attention)
  bool rope_per_layer_type = false;  // its rope_parameters hold one object per layer type (Gemma 3, OLMo 3)
  bool linear_attention = false;  // layer_types may name "linear_attention" (Gated DeltaNet) layers
  bool default_tie = false;       // tie_word_embeddings when config.json has none
  double default_theta = 1e4;     // RoPE base when config.json has none
  double default_norm_eps = 1e-6; // rms_norm_eps when config.json has none
  int64_t default_vocab = 32000;
  int64_t default_max_seq = 4096;
  // The config.json key of model.intermediate (Qwen3.5-MoE, which has no dense MLP: its experts' width).
  const char *intermediate_key = "intermediate_size";
  // An image-text checkpoint (Gemma3ForConditionalGeneration): its language model is of the family
  // `text_type`, configured by config.json's text_config (`text_defaults` for the keys a published
  // text_config leaves out, as transformers' text config class fills them), its weights named with
  // `text_prefix` where zfcore's begin "model." and `head_name` for "lm_head.weight", as transformers
  // saves them. zfcore trains the language model; every other tensor of the checkpoint (the vision
  // tower, its projector, multi-token prediction) is frozen, and an export copies it unchanged from
  // model.init_from (image_text.cpp). Such a family's `read` runs after the text family's, on the outer
  // config.json, for what the image-text class computes otherwise.
  std::string text_type, text_prefix, head_name;
  nlohmann::json text_defaults;
  bool image_text() const { return !text_type.empty(); }
};

// Every family of the Llama lineage that zfcore reads (GPT-2 is its own model, gpt2.cpp).
const std::vector<Family> &families();
const Family *find_family(const std::string &type);
// "llama, qwen2, qwen3, ..." for messages and the schema.
std::string family_names();

// The keys every family shares (sizes, head_dim, RoPE, sliding windows, activation, biases) in and out.
void read_decoder_config(const nlohmann::json &config, const std::string &source, const Family &family,
                         TransformerShape &s);
void write_decoder_config(const TransformerShape &s, const Family &family, nlohmann::json &config);

// The image-text family (model_type `type`, class `architecture`) of the language model `text`: its
// weights under `text_prefix`, its head `head_name`, text_config's keys it leaves out as `text_defaults`;
// built from a checkpoint only (no `defaults`: zfcore builds no vision tower) and configured by
// text_config alone (no `read` or `write`: a family sets its own where the outer class differs).
Family image_text_of(const Family &text, const std::string &type, const std::string &architecture,
                     const std::string &text_prefix, const std::string &head_name,
                     nlohmann::json text_defaults = nlohmann::json());
// An image-text family's config.json: the language model's keys from text_config (image_text.cpp);
// image_text_config gives them with the text class's defaults for those it leaves out.
nlohmann::json image_text_config(const nlohmann::json &config, const Family &family);
void read_image_text_config(const nlohmann::json &config, const std::string &source, const Family &family,
                            TransformerShape &s);
// `config` as hf_config wrote it for the text family, nested under text_config of `family`'s.
void write_image_text_config(const TransformerShape &s, const Family &family, nlohmann::json &config);
// The names a checkpoint of model type `type` may give zfcore's parameter `name` ("model.layers.0...."),
// the one an export writes first: `name` itself, but for an image-text family's language model.
std::vector<std::string> hf_tensor_names(const std::string &type, const std::string &name);

}  // namespace zf
