// The [data] table of the config.
#include "config/config.hpp"

namespace zf {

std::vector<zf_param_decl> data_schema() {
  return {
      decl("type", ZF_PARAM_STRING, "random", "data source", 0, 0, 0, "random"),
      decl("samples", ZF_PARAM_INT, "256", "random: size of the fixed data set", kMin, 1)
  };
}

}  // namespace zf
