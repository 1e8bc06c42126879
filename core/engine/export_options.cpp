#include "engine/export_options.hpp"

#include "data/data_source.hpp"
#include "tokenizer/tokenizer_export.hpp"

namespace zf {

HfExportOptions run_export_options(const RunConfig &config, const torch::Tensor &master, const zf_layout *layout) {
  HfExportOptions options = hf_export_options(config, master, layout);
  options.tokenizer_files = exported_tokenizer_files(config);
  options.chat_template = exported_chat_template(config);
  return options;
}

}  // namespace zf
