// zoo.hpp: builds the model named by [model].type.
#pragma once

#include "config/config.hpp"
#include "model/model.hpp"
#include "model/param_source.hpp"

#include <memory>

namespace zf {

// A model whose parameters may have shapes only, and where their values come from.
struct ModelAndValues {
  std::unique_ptr<Model> model;
  std::unique_ptr<ParameterSource> values;  // refers to the model: destroy it first
};

// Random values come from torch's global generator (seed it first): each tensor draws its seed
// while the model is built, in the same order whichever of these builds it.
// The model with every parameter in memory, holding its initial values.
std::unique_ptr<Model> make_model(const RunConfig &config);
// The model without memory for its parameters (a transformer; linear_stack has it anyway) and its
// initial values: random, or model.init_from's weights (checked, not read yet).
ModelAndValues make_unallocated_model(const RunConfig &config);
torch::Dtype compute_dtype(const RunConfig &config);  // [model].dtype
bool interleaved_blocks(const RunConfig &config);   // [model].block_order = "interleaved"
bool column_major(const RunConfig &config);         // [model].column_major

}  // namespace zf
