// finite_values.hpp: whether the weights and optimizer state a run saves or loads are finite, and
// the parameter a value that is not belongs to (a diverged update must not replace the good
// checkpoints; a damaged or diverged checkpoint must not be trained on).
#pragma once

#include "comm/communicator.hpp"
#include <zf/zf_plugin.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>

namespace zf {

// The parameter that element `index` of the flat buffers belongs to: "'NAME' element I".
std::string parameter_at(const zf_layout &layout, uint64_t index);

// "" or this rank's first value of `values` that is not finite, named by `where(index)`.
std::string local_non_finite(const at::Tensor &values, const std::function<std::string(int64_t)> &where);

// Collective: "" when every value of `values`, this rank's elements [begin, ...) of the flat
// parameters of `layout`, is finite on every rank; else the first one that is not and the parameter
// it belongs to (the same text on every rank).
std::string non_finite_parameter(const at::Tensor &values, uint64_t begin, const zf_layout &layout,
                                 Communicator &comm);

}  // namespace zf
