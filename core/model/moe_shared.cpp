#include "model/moe_shared.hpp"

#include "model/fused_ops.hpp"

namespace zf {

torch::Tensor shared_expert(const SharedExpertWeights &w, const torch::Tensor &x, FusedKernels fused) {
  const torch::Tensor hidden =
      gated_activation(torch::linear(x, w.gate), torch::linear(x, w.up), /*gelu=*/false, fused);
  return torch::sigmoid(torch::linear(x, w.score)) * torch::linear(hidden, w.down);
}

}  // namespace zf
