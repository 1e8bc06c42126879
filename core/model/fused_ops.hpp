// fused_ops.hpp: the elementwise work around a decoder layer's matrix products, in the one place
// every family's layer (decoder.cpp) takes it from: RMSNorm, the residual add with the RMSNorm after
// it, RoPE, the gated MLP's activation. Where `fused` puts zfcore's kernels (FusedKernels, float32 or bf16:
// a GPU's by default, the CPU's too with FusedKernels::always) each is one hand-written kernel forward and
// one or two backward (fused_kernels.hpp), whose values are the composed ops' within one rounding of
// the dtype; elsewhere libtorch's ops compose it, exactly as transformers does.
#pragma once

#include "model/decoder_features.hpp"
#include "model/fused_kernels.hpp"
#include "model/rope.hpp"
#include "model/transformer_shape.hpp"

#include <torch/torch.h>

#include <utility>

namespace zf {

// RMSNorm over the last dimension, normalised in float32, the weight applied as `mode` says.
torch::Tensor rms_norm(const torch::Tensor &x, const torch::Tensor &weight, NormWeight mode, double eps, FusedKernels fused);

// {residual + branch, rms_norm(residual + branch)}: a layer's residual add and the next norm in one pass.
std::pair<torch::Tensor, torch::Tensor> add_rms_norm(const torch::Tensor &residual, const torch::Tensor &branch,
                                                     const torch::Tensor &weight, NormWeight mode, double eps,
                                                     FusedKernels fused);

// act(gate) * up: SwiGLU (silu) or, with `gelu`, GeGLU (gelu with the tanh approximation).
torch::Tensor gated_activation(const torch::Tensor &gate, const torch::Tensor &up, bool gelu, FusedKernels fused);

// apply_rope (rope.hpp): x [batch, heads, length, head_dim] rotated by the tables.
torch::Tensor rotate(const torch::Tensor &x, const RopeTables &tables, FusedKernels fused);

// Whether this build has the GPU's fused kernels (a CUDA build).
bool fused_kernels_built();

// The kernels' side, shared with the fused loss (fused_loss.cpp). Whether a kernel does x's work
// under `fused`: float32 or bf16, on a GPU of a CUDA build, or on the CPU with FusedKernels::always.
bool kernels_take(const torch::Tensor &x, FusedKernels fused);
// Where a kernel on x's tensors runs: x's GPU and its current stream, or the host.
kernels::Place kernel_place(const torch::Tensor &x);
// Throws the kernel's error, located, with what to do (`what`: the kernel's name).
void check_kernel(const char *error, const char *what);

}  // namespace zf
