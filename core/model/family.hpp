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

}  // namespace zf
