// Gemma 4's mixture-of-experts block (gemma4_moe.hpp): its own router, the experts of moe.hpp.
#include "model/gemma4_moe.hpp"

#include "model/fused_ops.hpp"

#include <cmath>

namespace zf {

MoeSpec gemma4_moe_spec(const Gemma4MoeWeights &w, int64_t top_k) {
  MoeSpec spec;
  spec.experts = w.router_proj.size(0);
  spec.top_k = top_k;
  spec.expert_intermediate = w.experts.gate.front().size(0);
  return spec;
}

torch::Tensor gemma4_moe(const Gemma4MoeWeights &w, const torch::Tensor &residual, const torch::Tensor &dense,
                         int64_t top_k, double eps, FusedKernels fused, bool grouped) {
  const int64_t hidden = residual.size(-1);
  auto norm = [&](const torch::Tensor &x, const torch::Tensor &weight) {
    return rms_norm(x, weight, NormWeight::scale_then_cast, eps, fused);
  };
  const torch::Tensor flat = residual.reshape({-1, hidden});
  // The router: which experts each token takes, and how much of each.
  torch::Tensor routed = at::rms_norm(flat.to(torch::kFloat32), {hidden}, std::nullopt, eps).to(flat.scalar_type());
  routed = routed * w.router_scale * (1 / std::sqrt(double(hidden)));
  torch::Tensor probabilities = torch::softmax(torch::linear(routed, w.router_proj), -1, torch::kFloat32);
  auto [weights, chosen] = probabilities.topk(top_k, -1);
  weights = weights / weights.sum(-1, true);
  weights = weights * w.per_expert_scale.index_select(0, chosen.reshape({-1})).view(chosen.sizes());
  const torch::Tensor out =
      routed_experts(gemma4_moe_spec(w, top_k), w.experts, norm(flat, w.pre_norm), chosen, weights, true, grouped);
  return norm(dense, w.dense_out_norm) + norm(out.view(residual.sizes()), w.experts_out_norm);
}

}  // namespace zf
