// hf_checkpoint.hpp: a zoo transformer to and from a Hugging Face checkpoint directory
// (config.json + model.safetensors, or shards listed in model.safetensors.index.json), in the
// names and layouts transformers' GPT2LMHeadModel, LlamaForCausalLM and Qwen2ForCausalLM use.
#pragma once

#include "model/model.hpp"

#include <optional>
#include <string>

namespace zf {

// Writes DIRECTORY/config.json and DIRECTORY/model.safetensors (created if needed; each file
// written under a temporary name, fsynced and renamed into place). Weights are stored in `dtype`
// (default: the model's compute dtype) with HF layouts (GPT-2 Conv1D weights transposed); a tied
// head is stored once, as the embedding. Throws for models without a HF format (linear_stack).
void save_hf_checkpoint(Model &model, const std::string &directory,
                        std::optional<torch::Dtype> dtype = std::nullopt);

// Copies the weights of DIRECTORY into `model`, converting dtype and layout. config.json must
// describe the model's shape; a missing tensor or a shape mismatch is an error naming the tensor;
// tensors the model does not use are reported as a warning.
void load_hf_checkpoint(Model &model, const std::string &directory);

}  // namespace zf
