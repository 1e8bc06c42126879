// gemma4_moe.hpp: Gemma 4's mixture-of-experts block (enable_moe_block, gemma-4-26B-A4B), which runs
// beside each layer's dense MLP: a router over the layer's residual (an RMSNorm without weight, times
// its `scale` and hidden^-1/2, a projection, softmax in fp32, the top k renormalised, times each chosen
// expert's `per_expert_scale`), and GeGLU experts run as the other families' (moe.hpp's routed_experts:
// grouped GEMMs on a GPU, a loop over the experts elsewhere). Checkpoints hold a layer's experts as two
// 3-D tensors, experts.gate_up_proj [E, 2I, H] and experts.down_proj [E, H, I]; zfcore holds one 2-D
// matrix per expert and projection (fused_experts.hpp), so that ZenFlow selects each one's columns.
#pragma once

#include "model/moe.hpp"
#include "model/transformer_shape.hpp"

#include <torch/torch.h>

namespace zf {

struct Gemma4MoeWeights {
  torch::Tensor router_proj, router_scale, per_expert_scale;  // [E, H], [H], [E]
  MoeWeights experts;  // gate, up [I, H] and down [H, I] per expert (its router: the three above)
  // pre_feedforward_layernorm_2, post_feedforward_layernorm_1, post_feedforward_layernorm_2
  torch::Tensor pre_norm, dense_out_norm, experts_out_norm;
};

// `residual` [B, T, H]: the layer's hidden state after attention; `dense` the dense MLP's output on it.
// Returns post_feedforward_layernorm_1(dense) + post_feedforward_layernorm_2(experts(norm_2(residual))),
// the norms' weights applied as Gemma 4's (w, in fp32). `grouped`: the experts as grouped GEMMs.
torch::Tensor gemma4_moe(const Gemma4MoeWeights &w, const torch::Tensor &residual, const torch::Tensor &dense,
                         int64_t top_k, double eps, FusedKernels fused, bool grouped);
// The MoeSpec routed_experts and moe_grouped_by_default read for these experts.
MoeSpec gemma4_moe_spec(const Gemma4MoeWeights &w, int64_t top_k);

}  // namespace zf
