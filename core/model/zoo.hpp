// zoo.hpp: builds the model named by [model].type.
#pragma once

#include "config/config.hpp"
#include "model/model.hpp"

#include <memory>

namespace zf {

// Parameters are initialized from torch's global generator (seed it first).
std::unique_ptr<Model> make_model(const RunConfig &config);
torch::Dtype compute_dtype(const RunConfig &config);  // [model].dtype

}  // namespace zf
