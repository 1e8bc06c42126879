// hf_checkpoint.hpp: a zoo transformer to and from a Hugging Face checkpoint directory
// (config.json + model.safetensors, or shards listed in model.safetensors.index.json), in the
// names and layouts transformers' GPT2LMHeadModel, LlamaForCausalLM and Qwen2ForCausalLM use.
#pragma once

#include "model/model.hpp"
#include "model/param_source.hpp"

#include <zf/zf_plugin.h>

#include <string>
#include <utility>
#include <vector>

namespace zf {

class RunConfig;

// What an export writes besides the model's own weights and shape.
struct HfExportOptions {
  std::string dtype = "auto";  // auto (the model's compute dtype), float32 or bfloat16
  // The checkpoint the model started from (model.init_from): the fields of its config.json that
  // are not the shape (token ids, dropout, ...) are kept and its generation_config.json copied.
  std::string init_from;
  // The directory whose tokenizer files (tokenizer.json, tokenizer_config.json, ...) are copied, or
  // the tokenizer file data.tokenizer_path names: then it and the tokenizer_config.json beside it only.
  std::string tokenizer_dir;
  // Tokenizer files written as they are, name -> contents (the byte tokenizer's, which has no files
  // to copy: tokenizer/tokenizer_export.hpp).
  std::vector<std::pair<std::string, std::string>> tokenizer_files;
  // The chat template the model trained with, written as chat_template.jinja (which transformers
  // prefers to tokenizer_config.json's) when it is not the tokenizer's own: data.chat_template's,
  // or the Alpaca prompt of data.type = "alpaca" (exported_chat_template of data/data_source.hpp).
  // Empty: the tokenizer's files as they are.
  std::string chat_template;
  // dtype float32 of a model that computes in another dtype: the fp32 master weights of the whole
  // model in `layout` order (undefined: such an export is refused).
  torch::Tensor master;
  const zf_layout *layout = nullptr;
};

// The options a run's config asks for: checkpoint.export_dtype, model.init_from, and the
// tokenizer of [data] (data.tokenizer_path's directory, or init_from's for pre-tokenized data).
HfExportOptions hf_export_options(const RunConfig &config, const torch::Tensor &master = {},
                                  const zf_layout *layout = nullptr);

// Writes DIRECTORY (created if needed): model.safetensors in HF layouts (GPT-2 Conv1D weights
// transposed; a tied head stored once, as the embedding), config.json, generation_config.json and
// the tokenizer files, each written under a temporary name and renamed into place. Throws for
// models without a HF format (linear_stack).
void save_hf_checkpoint(Model &model, const std::string &directory, const HfExportOptions &options = {});

// The weights of DIRECTORY as the source of `model`'s parameters (param_source.hpp), converting
// dtype and layout as asked. Opening checks everything from the headers, reading no weights:
// config.json must describe the model's shape; a missing tensor, a shape mismatch or integer
// weights are errors naming the tensor; tensors the model does not use are a warning. bytes_read()
// counts the stored bytes fills have read; a value that is not finite is an error naming it.
// The model must outlive the source.
std::unique_ptr<ParameterSource> hf_parameter_source(Model &model, const std::string &directory);

// Replaces the values of `model`'s parameters with the weights of DIRECTORY (hf_parameter_source).
void load_hf_checkpoint(Model &model, const std::string &directory);

}  // namespace zf
