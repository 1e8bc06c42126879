// fused_ops.hpp: the elementwise work around a decoder layer's matrix products, in the one place
// every family's layer (decoder.cpp) takes it from: RMSNorm, the residual add with the RMSNorm after
// it, RoPE, the gated MLP's activation. With `fused` on a GPU of a CUDA build (float32 or bf16) each
// is one hand-written kernel forward and one or two backward (fused_kernels.cu), whose values are
// the composed ops' within one rounding of the dtype; otherwise libtorch's ops compose it, exactly
// as transformers does (the CPU path always).
#pragma once

#include "model/decoder_features.hpp"
#include "model/rope.hpp"

#include <torch/torch.h>

#include <utility>

namespace zf {

// RMSNorm over the last dimension, normalised in float32, the weight applied as `mode` says.
torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight, NormWeight mode, double eps, bool fused);

// {residual + branch, rms_norm(residual + branch)}: a layer's residual add and the next norm in one pass.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor &residual, const torch::Tensor &branch,
                                                     const torch::Tensor &weight, NormWeight mode, double eps,
                                                     bool fused);

// act(gate) * up: SwiGLU (silu) or, with `gelu`, GeGLU (gelu with the tanh approximation).
torch::Tensor gated_activation(const torch::Tensor &gate, const torch::Tensor &up, bool gelu, bool fused);

// apply_rope (rope.hpp): x [batch, heads, length, head_dim] rotated by the tables.
torch::Tensor rotate(const torch::Tensor &x, const RopeTables &tables, bool fused);

// Whether this build has the fused kernels (a CUDA build).
bool fused_kernels_built();

}  // namespace zf
