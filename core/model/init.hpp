// init.hpp: random initial values drawn on all of the rank's cores. A billion-parameter model's
// normal draws take seconds per thread; here they come in fixed-size pieces, each from its own
// generator seeded from the tensor's seed, so the values do not depend on how many threads drew
// them, and any part of a tensor can be drawn without the rest (a rank fills only its shard).
#pragma once

#include "model/param_source.hpp"

#include <torch/torch.h>

#include <vector>

namespace zf {

// A tensor's seed: one draw of torch's default CPU generator.
uint64_t draw_init_seed();

// Writes `region` of the N(0, std^2) values of a [rows, cols] tensor with `seed` into destination
// (contiguous, region.numel() elements of float32 or bfloat16: drawn in fp32, rounded to nearest).
void fill_normal(uint64_t seed, double std, int64_t rows, int64_t cols, const StoredRegion &region,
                 torch::Tensor destination);

// N(0, std^2) values of `dtype`, advancing torch's default CPU generator by one draw: the whole
// tensor of fill_normal with draw_init_seed().
torch::Tensor random_normal(const std::vector<int64_t> &sizes, double std, torch::Dtype dtype);

}  // namespace zf
