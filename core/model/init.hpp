// init.hpp: random initial values drawn on all of the rank's cores. A billion-parameter model's
// normal draws take seconds per thread; here they come in fixed-size pieces, each from its own
// generator seeded from the default one, so the values do not depend on how many threads drew them.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace zf {

// N(0, std^2) values of `dtype` (drawn in fp32, rounded to nearest), advancing torch's default
// CPU generator by one draw.
torch::Tensor random_normal(const std::vector<int64_t> &sizes, double std, torch::Dtype dtype);

}  // namespace zf
