// moe_layer.hpp: a mixture-of-experts layer of random weights (one matrix per expert), as the MoE
// tests on the CPU (tests/models) and on the GPU (tests/gpu) build it.
#pragma once

#include "model/moe.hpp"

#include <torch/torch.h>

#include <vector>

namespace zf::test {

struct MoeLayer {
  MoeSpec spec;
  MoeWeights w;
  std::vector<torch::Tensor> all() const {  // the router, then each expert's gate, up and down
    std::vector<torch::Tensor> t = {w.router};
    for (size_t e = 0; e < w.gate.size(); ++e) t.insert(t.end(), {w.gate[e], w.up[e], w.down[e]});
    return t;
  }
};

// Weights drawn on the CPU (N(0, 1) scaled: the router by router_std, the experts by expert_std), then
// moved to `options`' device and dtype, each a leaf that requires its gradient.
inline MoeLayer random_moe_layer(int64_t experts, int64_t k, bool norm_topk, int64_t h, int64_t inner,
                                 double router_std, double expert_std, torch::TensorOptions options = {}) {
  MoeLayer l;
  l.spec.experts = experts;
  l.spec.top_k = k;
  l.spec.expert_intermediate = inner;
  l.spec.norm_topk = norm_topk;
  auto param = [&](std::vector<int64_t> sizes, double std) {
    return (torch::randn(sizes) * std).to(options).requires_grad_();
  };
  l.w.router = param({experts, h}, router_std);
  for (int64_t e = 0; e < experts; ++e) {
    l.w.gate.push_back(param({inner, h}, expert_std));
    l.w.up.push_back(param({inner, h}, expert_std));
    l.w.down.push_back(param({h, inner}, expert_std));
  }
  return l;
}

}  // namespace zf::test
