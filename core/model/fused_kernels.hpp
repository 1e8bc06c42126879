// fused_kernels.hpp: the launches of the decoder layer's fused kernels. Each runs where its tensors
// are (`Place`): on a GPU the CUDA kernel (fused_kernels.cu, CUDA builds), on the CPU the same
// arithmetic as plain loops over the rows (fused_kernels_host.cpp, every build), so that the autograd
// functions around them (fused_ops.cpp, fused_loss.cpp) run, and are tested, on either. Plain C++
// types, compiled without the CUDA compiler. Each returns nullptr, or the error's text. Tensors are
// float32 or bf16 (`bf16`), rows of `cols` contiguous elements; statistics and weight gradients are
// float32. Arithmetic is float32 (the host sums a row in double); values are rounded to the dtype
// where each launch says, as the composed libtorch ops round them.
#pragma once

#include <cstdint>

namespace zf::kernels {

// Where a launch runs: a GPU's stream (`gpu`, a CUDA build's kernels) or the host's threads.
struct Place {
  bool gpu = false;
  void *stream = nullptr;  // cudaStream_t, when gpu
};

// How an RMSNorm applies its weight (decoder_features.hpp's NormWeight, same order).
enum class NormMode : int { cast_then_scale = 0, scale_then_cast = 1, one_plus = 2 };

struct NormLaunch : Place {
  const void *x = nullptr;       // [rows, cols]
  const void *branch = nullptr;  // [rows, cols] or null: normalises x + branch (rounded to the dtype)
  void *sum = nullptr;           // [rows, cols]: x + branch, written when branch is given
  const void *weight = nullptr;  // [cols], the model's dtype
  void *y = nullptr;             // [rows, cols]
  float *rstd = nullptr;         // [rows]: 1 / sqrt(mean(h^2) + eps), h the normalised rows
  int64_t rows = 0, cols = 0;
  NormMode mode = NormMode::cast_then_scale;
  float eps = 1e-6f;
  bool bf16 = false;
};
const char *rms_norm_forward(const NormLaunch &launch);

struct NormBackwardLaunch : Place {
  const void *dy = nullptr;      // [rows, cols]: gradient of y
  const void *dsum = nullptr;    // [rows, cols] or null: gradient of the sum (the residual stream), added to dx
  const void *h = nullptr;       // [rows, cols]: the normalised rows (x, or the sum)
  const void *weight = nullptr;  // [cols]
  const float *rstd = nullptr;   // [rows]
  void *dx = nullptr;            // [rows, cols]
  float *dweight_parts = nullptr;  // [parts, cols]: partial sums of the weight's gradient (summed by the caller)
  int64_t parts = 0;               // weight_gradient_parts(rows)
  int64_t rows = 0, cols = 0;
  NormMode mode = NormMode::cast_then_scale;
  bool bf16 = false;
};
const char *rms_norm_backward(const NormBackwardLaunch &launch);
int64_t weight_gradient_parts(int64_t rows);

// act(gate) * up, act = silu (SwiGLU) or gelu with the tanh approximation (GeGLU); gate and up are
// [rows, cols] with their own row strides (the halves of one projection), out and the gradients
// contiguous. The activation is rounded to the dtype before the product, as the composed ops do.
struct GluLaunch : Place {
  const void *gate = nullptr, *up = nullptr;
  int64_t gate_row_stride = 0, up_row_stride = 0;
  const void *dout = nullptr;  // backward only
  void *out = nullptr;         // forward: the product; backward: unused
  void *dgate = nullptr, *dup = nullptr;  // backward only
  int64_t rows = 0, cols = 0;
  bool gelu = false;
  bool bf16 = false;
};
const char *glu_forward(const GluLaunch &launch);
const char *glu_backward(const GluLaunch &launch);

// RoPE over the first `rotated` channels of each head of x [batch, heads, length, head_dim] (any
// strides, channels contiguous): out = x * cos + x[(c + rotated/2) % rotated] * signed_sin, the
// tables [length, rotated] contiguous (rope.hpp); channels past `rotated` are copied. sign = -1
// turns the forward into its backward (the transposed rotation).
struct RopeLaunch : Place {
  const void *x = nullptr;
  void *out = nullptr;
  const void *cos = nullptr, *signed_sin = nullptr;
  int64_t batch = 0, heads = 0, length = 0, head_dim = 0, rotated = 0;
  int64_t x_strides[3] = {0, 0, 0};    // batch, head, position
  int64_t out_strides[3] = {0, 0, 0};
  float sign = 1;
  bool bf16 = false;
};
const char *rope(const RopeLaunch &launch);

// The fused loss's elementwise work (fused_loss.hpp) on a chunk of logits [rows, cols] in the compute
// dtype, transformed as the family does (divisor, then softcap; the result rounded to the dtype).
// Forward: each row's log-sum-exp, and its loss (lse - the target's logit) where its target counts.
// Backward: the gradient of the raw logits, written over them: (softmax - one_hot(target)) * row_scale,
// through the transform; the columns are the vocabulary's entries first, first + 1, ...
struct LossLaunch : Place {
  void *logits = nullptr;            // [rows, cols], contiguous; the backward overwrites it
  const int64_t *targets = nullptr;  // [rows]; kIgnoreIndex (-100) where the loss does not count
  int64_t first = 0;                 // the vocabulary entry of column 0
  float *lse = nullptr;              // [rows]: written by the forward, read by the backward
  float *loss = nullptr;             // [rows]: forward only
  const float *row_scale = nullptr;  // [rows]: backward only (0 where the loss does not count)
  int64_t rows = 0, cols = 0;
  float divisor = 1, softcap = 0;
  bool bf16 = false;
};
const char *loss_forward(const LossLaunch &launch);
const char *loss_backward(const LossLaunch &launch);

// The CUDA kernels (fused_kernels.cu) and the host loops (fused_kernels_host.cpp) that the launches
// above run, by their Place.
namespace cuda {
const char *rms_norm_forward(const NormLaunch &launch);
const char *rms_norm_backward(const NormBackwardLaunch &launch);
const char *glu_forward(const GluLaunch &launch);
const char *glu_backward(const GluLaunch &launch);
const char *rope(const RopeLaunch &launch);
const char *loss_forward(const LossLaunch &launch);
const char *loss_backward(const LossLaunch &launch);
}  // namespace cuda
namespace host {
const char *rms_norm_forward(const NormLaunch &launch);
const char *rms_norm_backward(const NormBackwardLaunch &launch);
const char *glu_forward(const GluLaunch &launch);
const char *glu_backward(const GluLaunch &launch);
const char *rope(const RopeLaunch &launch);
const char *loss_forward(const LossLaunch &launch);
const char *loss_backward(const LossLaunch &launch);
}  // namespace host

}  // namespace zf::kernels
