#include "model/zoo.hpp"

#include "model/hf_checkpoint.hpp"
#include "model/linear_stack.hpp"
#include "model/transformer.hpp"
#include "runtime/error.hpp"

namespace zf {

torch::Dtype compute_dtype(const RunConfig &config) {
  return config.string("model", "dtype") == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

std::unique_ptr<Model> make_model(const RunConfig &config) {
  std::string type = config.string("model", "type");
  if (is_transformer_config(config)) {
    TransformerOptions options = transformer_options(config);
    std::unique_ptr<TransformerModel> model = make_transformer(options);
    if (!options.init_from.empty()) load_hf_checkpoint(*model, options.init_from);
    return model;
  }
  if (type == "linear_stack") {
    for (const char *key : {"preset", "init_from"})
      ZF_REQUIRE(config.string("model", key).empty(), "%s: model.%s does not apply to model.type = \"linear_stack\"",
                 config.where("model", key).str().c_str(), key);
    return make_linear_stack(config.integer("model", "hidden"), config.integer("model", "layers"),
                             compute_dtype(config));
  }
  throw Error(format("%s: model.type = \"%s\" is not built into this zfcore",
                     config.where("model", "type").str().c_str(), type.c_str()));
}

}  // namespace zf
