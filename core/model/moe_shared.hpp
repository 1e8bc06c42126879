// moe_shared.hpp: Qwen3.5-MoE's shared expert (MoeSpec::shared_intermediate): a SwiGLU MLP that every
// token uses beside its routed experts (moe.hpp), its output scaled per token by
// sigmoid(shared_expert_gate . x), then added to theirs.
#pragma once

#include "model/transformer_shape.hpp"

#include <torch/torch.h>

namespace zf {

struct SharedExpertWeights {
  torch::Tensor gate, up, down;  // [width, hidden], [width, hidden], [hidden, width]
  torch::Tensor score;           // shared_expert_gate: [1, hidden]
};

// The shared expert's contribution on x [..., hidden]; `fused`: where the fused SwiGLU kernel runs (fused_ops.hpp).
torch::Tensor shared_expert(const SharedExpertWeights &w, const torch::Tensor &x, FusedKernels fused);

}  // namespace zf
