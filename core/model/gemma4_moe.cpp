// Gemma 4's mixture-of-experts block (gemma4_moe.hpp). Each expert runs on the tokens that chose it,
// its weighted output added back in token order, as transformers' eager experts do.
#include "model/gemma4_moe.hpp"

#include "model/fused_ops.hpp"

#include <cmath>

namespace zf {

torch::Tensor gemma4_moe(const Gemma4MoeWeights &w, const torch::Tensor &residual, const torch::Tensor &dense,
                         int64_t top_k, double eps, FusedKernels fused) {
  const int64_t hidden = residual.size(-1), experts = w.router_proj.size(0);
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
  // The experts, each on its tokens.
  const torch::Tensor x = norm(flat, w.pre_norm);
  torch::Tensor out = torch::zeros_like(x);
  const torch::Tensor hits = torch::bincount(chosen.reshape({-1}), {}, experts).to(torch::kCPU);
  for (int64_t e = 0; e < experts; ++e) {
    if (hits[e].item<int64_t>() == 0) continue;  // one copy to the host for the layer, then none
    const torch::Tensor where = chosen.eq(e).nonzero();  // [n, 2]: token, rank among its choices
    const torch::Tensor tokens = where.select(1, 0), ranks = where.select(1, 1);
    std::vector<torch::Tensor> parts = torch::linear(x.index_select(0, tokens), w.gate_up[e]).chunk(2, -1);
    torch::Tensor y = torch::linear(torch::gelu(parts[0], "tanh") * parts[1], w.down[e]);
    y = y * weights.index({tokens, ranks}).unsqueeze(-1);
    out = out.index_add(0, tokens, y.to(out.scalar_type()));
  }
  return norm(dense, w.dense_out_norm) + norm(out.view(residual.sizes()), w.experts_out_norm);
}

}  // namespace zf
