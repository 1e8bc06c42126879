// export_options.hpp: what a run's (or zfcore export's) Hugging Face export writes beside the
// weights: the tokenizer's files and the chat template the model trained with.
#pragma once

#include "config/config.hpp"
#include "model/hf_checkpoint.hpp"

namespace zf {

HfExportOptions run_export_options(const RunConfig &config, const torch::Tensor &master, const zf_layout *layout);

}  // namespace zf
