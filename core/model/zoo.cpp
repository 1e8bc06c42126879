#include "model/zoo.hpp"

#include "model/linear_stack.hpp"
#include "runtime/error.hpp"

namespace zf {

torch::Dtype compute_dtype(const Config &config) {
  return config.string("model", "dtype") == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

std::unique_ptr<Model> make_model(const Config &config) {
  std::string type = config.string("model", "type");
  if (type == "linear_stack")
    return make_linear_stack(config.integer("model", "hidden"), config.integer("model", "layers"),
                             compute_dtype(config));
  throw Error(format("%s: model.type = \"%s\" is not built into this zfcore",
                     config.where("model", "type").str().c_str(), type.c_str()));
}

}  // namespace zf
