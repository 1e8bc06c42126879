// transformer_shape.hpp: the shape of a decoder-only transformer of the zoo (GPT-2 and the families
// of model/families/: Llama, Qwen, Mistral, OLMo, Gemma, Phi, SmolLM, Granite),
// the named presets with their published shapes, parameter counts computed from shapes alone, the
// conversion to and from Hugging Face config.json, and the resolution of the [model] table
// (type, preset, explicit keys, init_from) into one shape. No libtorch here: the data source and
// the CLI can ask for the shape (vocab, context length) without building the model.
#pragma once

#include "model/decoder_features.hpp"

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zf {

class RunConfig;

struct TransformerShape {
  std::string type;  // Hugging Face model_type: "gpt2" or a family's (family.hpp)
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;      // grouped-query attention; == heads for GPT-2 and Llama-2-7B/13B
  int64_t intermediate = 0;  // MLP width
  int64_t vocab = 0;
  int64_t max_seq = 0;       // context length (GPT-2: rows of the position table)
  double rope_theta = 0;     // Llama/Qwen2 only
  double norm_eps = 0;
  bool tie_embeddings = false;  // the output head reuses the token embedding
  bool qkv_bias = false;        // GPT-2 and Qwen2 have q/k/v biases, Llama has none
  DecoderFeatures features;     // how a layer of the Llama lineage is composed (not GPT-2's)

  int64_t head_dim() const { return features.head_dim > 0 ? features.head_dim : hidden / heads; }
  bool is_gpt2() const { return type == "gpt2"; }
  // Number of trainable parameters (a tied head counted once).
  uint64_t parameter_count() const;
  // The parameters one token computes with: a sparse layer's top k experts of its experts (moe.hpp),
  // the whole model otherwise. MFU of a mixture-of-experts model is counted over these.
  uint64_t active_parameter_count() const;
  // Throws zf::Error naming `source` (a file:line or a directory) when the shape is inconsistent.
  void validate(const std::string &source) const;
  bool operator==(const TransformerShape &other) const;

 private:
  uint64_t counted_parameters(bool active) const;
};

// Where zfcore's fused kernels (model/fused_ops.hpp, model/fused_loss.hpp) do a layer's elementwise
// work and the loss's softmax (model.fused). `off`: libtorch's ops one by one, the loss from the
// whole logits. `gpu` (true, the default): the loss in chunks on every device, the kernels on a GPU,
// libtorch's ops on the CPU (faster there, docs/gpu.md). `always`: the kernels on the CPU too (their
// host loops), the CPU runs of the kernels' autograd plumbing that the tests take.
enum class FusedKernels { off, gpu, always };

// Everything the [model] table says about a transformer beyond its shape.
struct TransformerOptions {
  TransformerShape shape;
  std::string dtype = "float32";        // "float32" or "bfloat16"
  double dropout = 0;
  bool activation_checkpointing = false;
  // Under activation checkpointing, how many layers (the first ones) recompute in the backward;
  // 0: all of them. The last layers keep their activations: less recompute, more memory.
  int64_t checkpoint_layers = 0;
  FusedKernels fused = FusedKernels::gpu;
  std::string init_from;                // a Hugging Face checkpoint directory, or ""
  // The embedding row of init_from's pad_token_id, which gets no gradient (nn.Embedding's
  // padding_idx, as every family but GPT-2 builds its embeddings); -1: none.
  int64_t padding_idx = -1;
};

// The first field in which a and b differ, as "hidden = 64 vs 128"; "" when they are equal.
// The first field that differs, e.g. "hidden = 64 here, 128 in the checkpoint".
std::string shape_difference(const TransformerShape &a, const TransformerShape &b, const char *a_name,
                             const char *b_name);

// Preset names: the published shapes of presets.cpp (gpt2, llama3.1-8b, qwen3-8b, gemma3-27b, ...).
std::vector<std::string> preset_names();
std::optional<TransformerShape> find_preset(const std::string &name);
// Parameter count of a preset without allocating anything; throws for an unknown name.
uint64_t preset_parameter_count(const std::string &name);

// Hugging Face config.json <-> shape. `source` names the file in error messages; unsupported
// features (rope scaling, sliding windows, biases Llama does not have) are errors.
TransformerShape shape_from_hf_config(const nlohmann::json &config, const std::string &source);
// The same without validate(), which reads the [model] schema: for the presets, which the schema lists.
TransformerShape unchecked_shape_from_hf_config(const nlohmann::json &config, const std::string &source);
// DIRECTORY/config.json, read once: the model's shape and what else of it the [model] table resolves.
struct HfModelConfig {
  TransformerShape shape;
  double dropout = 0;        // the largest of resid_pdrop, embd_pdrop, attn_pdrop, attention_dropout
  int64_t padding_idx = -1;  // pad_token_id when the embeddings keep its row fixed (not GPT-2) and it is a token
};
HfModelConfig read_hf_model_config(const std::string &directory);
TransformerShape read_hf_config(const std::string &directory);  // read_hf_model_config(DIRECTORY).shape
// `dtype` is the torch_dtype written ("float32", "bfloat16"); dropout goes to the *_pdrop fields.
nlohmann::json hf_config(const TransformerShape &shape, const std::string &dtype, double dropout);

// True for the [model].type values this file resolves (gpt2 and the families').
bool is_transformer_type(const std::string &type);
// Resolves the [model] table: preset first, then init_from's config.json (which must agree with
// the preset and every explicit shape key), else explicit keys over the preset or family defaults.
// Throws zf::Error at the location of the offending key.
TransformerOptions transformer_options(const RunConfig &config);
// The [model] table names a transformer: a transformer type, or no type and a preset or init_from.
bool is_transformer_config(const RunConfig &config);

}  // namespace zf
