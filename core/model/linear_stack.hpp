// linear_stack.hpp: N layers of Linear(hidden, hidden) with bias and no activation, then
// cross-entropy over `hidden` classes: the workload of DeepSpeed's ZenFlow benchmark.
#pragma once

#include "model/model.hpp"

namespace zf {

std::unique_ptr<Model> make_linear_stack(int64_t hidden, int64_t layers, torch::Dtype dtype);
// Its parameters with shapes only (zfcore estimate lays them out without memory for them).
std::unique_ptr<Model> make_unallocated_linear_stack(int64_t hidden, int64_t layers, torch::Dtype dtype);

}  // namespace zf
