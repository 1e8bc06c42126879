// The [model] table of the config.
#include "config/config.hpp"

namespace zf {

std::vector<zf_param_decl> model_schema() {
  return {
      decl("type", ZF_PARAM_STRING, "linear_stack", "model architecture", 0, 0, 0, "linear_stack"),
      decl("hidden", ZF_PARAM_INT, "64", "hidden size (linear_stack: features and classes)", kMin, 1),
      decl("layers", ZF_PARAM_INT, "4", "number of layers", kMin, 1),
      decl("dtype", ZF_PARAM_STRING, "float32", "compute and working-parameter precision", 0, 0, 0, "float32|bfloat16"),
      decl("column_major", ZF_PARAM_BOOL, "true", "store 2-D weights column by column (ZenFlow selects columns)")
  };
}

}  // namespace zf
