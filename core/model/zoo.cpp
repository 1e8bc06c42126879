#include "model/zoo.hpp"

#include "model/hf_checkpoint.hpp"
#include "model/linear_stack.hpp"
#include "model/transformer.hpp"
#include "runtime/error.hpp"

namespace zf {

torch::Dtype compute_dtype(const RunConfig &config) {
  return config.string("model", "dtype") == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
}

bool interleaved_blocks(const RunConfig &config) { return config.string("model", "block_order") == "interleaved"; }

bool column_major(const RunConfig &config) { return config.boolean("model", "column_major"); }

ModelAndValues make_unallocated_model(const RunConfig &config) {
  std::string type = config.string("model", "type");
  ModelAndValues built;
  if (is_transformer_config(config)) {
    TransformerOptions options = transformer_options(config);
    std::unique_ptr<TransformerModel> model = make_unallocated_transformer(options);
    built.values = options.init_from.empty() ? model->initial_values() : hf_parameter_source(*model, options.init_from);
    built.model = std::move(model);
    return built;
  }
  if (type == "linear_stack") {
    for (const char *key : {"preset", "init_from"})
      ZF_REQUIRE(config.string("model", key).empty(), "%s: model.%s does not apply to model.type = \"linear_stack\"",
                 config.where("model", key).str().c_str(), key);
    built.model = make_linear_stack(config.integer("model", "hidden"), config.integer("model", "layers"),
                                    compute_dtype(config));
    built.values = current_values(built.model->parameters());
    return built;
  }
  throw Error(format("%s: model.type = \"%s\" is not built into this zfcore",
                     config.where("model", "type").str().c_str(), type.c_str()));
}

std::unique_ptr<Model> make_model(const RunConfig &config) {
  ModelAndValues built = make_unallocated_model(config);
  allocate_parameters(built.model->parameters(), *built.values);
  built.values.reset();
  return std::move(built.model);
}

}  // namespace zf
