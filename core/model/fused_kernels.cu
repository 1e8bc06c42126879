// The decoder layer's fused kernels on a GPU (fused_kernels.hpp; fused_kernels_host.cpp is the same
// arithmetic on the host). Arithmetic in float32; values are rounded
// to the tensors' dtype where the composed libtorch ops round them (a residual sum, an activation
// before its product), so that the forward gives the composed ops' values within one rounding.
#include "model/fused_kernels.hpp"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace zf::kernels {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float *p, int64_t i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16 *p, int64_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float *p, int64_t i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16 *p, int64_t i, float v) { p[i] = __float2bfloat16_rn(v); }
// v rounded to T and back: what storing v in a tensor of T and reading it again gives.
template <class T> __device__ __forceinline__ float round_to(float v);
template <> __device__ __forceinline__ float round_to<float>(float v) { return v; }
template <> __device__ __forceinline__ float round_to<__nv_bfloat16>(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// The sum of v over the block (every thread gets it). `shared` holds kThreads / 32 floats.
__device__ float block_sum(float v, float *shared) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // shared may still be read by an earlier call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? shared[lane] : 0.f;
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <class T>
__global__ void __launch_bounds__(kThreads) norm_forward(NormLaunch a) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x, base = row * a.cols;
  const T *x = static_cast<const T *>(a.x), *branch = static_cast<const T *>(a.branch);
  const T *w = static_cast<const T *>(a.weight);
  T *sum = static_cast<T *>(a.sum), *y = static_cast<T *>(a.y);
  float squares = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    float h = load(x, base + c);
    if (branch) {
      h = round_to<T>(h + load(branch, base + c));
      store(sum, base + c, h);
    }
    squares += h * h;
  }
  const float rstd = rsqrtf(block_sum(squares, shared) / float(a.cols) + a.eps);
  if (threadIdx.x == 0) a.rstd[row] = rstd;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    const float n = (branch ? load(sum, base + c) : load(x, base + c)) * rstd, wc = load(w, c);
    float out;
    switch (a.mode) {
      case NormMode::cast_then_scale: out = wc * round_to<T>(n); break;
      case NormMode::scale_then_cast: out = wc * n; break;
      default: out = n * (1.f + wc); break;
    }
    store(y, base + c, out);
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) norm_backward_rows(NormBackwardLaunch a) {
  __shared__ float shared[kThreads / 32];
  const int64_t row = blockIdx.x, base = row * a.cols;
  const T *dy = static_cast<const T *>(a.dy), *dsum = static_cast<const T *>(a.dsum);
  const T *h = static_cast<const T *>(a.h), *w = static_cast<const T *>(a.weight);
  T *dx = static_cast<T *>(a.dx);
  const float rstd = a.rstd[row];
  auto scale = [&](int64_t c) { return a.mode == NormMode::one_plus ? 1.f + load(w, c) : load(w, c); };
  float dot = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) dot += load(dy, base + c) * scale(c) * load(h, base + c) * rstd;
  const float mean = block_sum(dot, shared) / float(a.cols);
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) {
    const float hat = load(h, base + c) * rstd;
    float g = rstd * (load(dy, base + c) * scale(c) - hat * mean);
    if (dsum) g += load(dsum, base + c);
    store(dx, base + c, g);
  }
}

// Partial sums of the weight's gradient: block (x, part) sums rows part, part + parts, ... of its columns.
template <class T>
__global__ void __launch_bounds__(kThreads) norm_backward_weight(NormBackwardLaunch a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.cols) return;
  const T *dy = static_cast<const T *>(a.dy), *h = static_cast<const T *>(a.h);
  float acc = 0;
  for (int64_t row = blockIdx.y; row < a.rows; row += a.parts) {
    const float n = load(h, row * a.cols + c) * a.rstd[row];
    acc += load(dy, row * a.cols + c) * (a.mode == NormMode::cast_then_scale ? round_to<T>(n) : n);
  }
  a.dweight_parts[int64_t(blockIdx.y) * a.cols + c] = acc;
}

__device__ __forceinline__ float activation(float g, bool gelu) {
  if (gelu) return 0.5f * g * (1.f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
  return g / (1.f + __expf(-g));
}

__device__ __forceinline__ float activation_grad(float g, bool gelu) {
  if (gelu) {
    const float k = 0.7978845608028654f, t = tanhf(k * (g + 0.044715f * g * g * g));
    return 0.5f * (1.f + t) + 0.5f * g * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * g * g);
  }
  const float s = 1.f / (1.f + __expf(-g));
  return s * (1.f + g * (1.f - s));
}

template <class T>
__global__ void __launch_bounds__(kThreads) glu_forward_kernel(GluLaunch a) {
  const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
  T *out = static_cast<T *>(a.out);
  const int64_t n = a.rows * a.cols;
  const bool flat = a.gate_row_stride == a.cols && a.up_row_stride == a.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t g = i, u = i;
    if (!flat) {
      const int64_t r = i / a.cols, c = i % a.cols;
      g = r * a.gate_row_stride + c, u = r * a.up_row_stride + c;
    }
    const float act = round_to<T>(activation(load(gate, g), a.gelu));
    store(out, i, act * load(up, u));
  }
}

template <class T>
__global__ void __launch_bounds__(kThreads) glu_backward_kernel(GluLaunch a) {
  const T *gate = static_cast<const T *>(a.gate), *up = static_cast<const T *>(a.up);
  const T *dout = static_cast<const T *>(a.dout);
  T *dgate = static_cast<T *>(a.dgate), *dup = static_cast<T *>(a.dup);
  const int64_t n = a.rows * a.cols;
  const bool flat = a.gate_row_stride == a.cols && a.up_row_stride == a.cols;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t gi = i, ui = i;
    if (!flat) {
      const int64_t r = i / a.cols, c = i % a.cols;
      gi = r * a.gate_row_stride + c, ui = r * a.up_row_stride + c;
    }
    const float g = load(gate, gi), u = load(up, ui), d = load(dout, i);
    store(dup, i, d * round_to<T>(activation(g, a.gelu)));
    store(dgate, i, d * u * activation_grad(g, a.gelu));
  }
}

// Index: the type of the position arithmetic (32-bit divisions where every index fits: several
// times cheaper than 64-bit ones).
template <class T, class Index>
__global__ void __launch_bounds__(kThreads) rope_kernel(RopeLaunch a) {
  const T *x = static_cast<const T *>(a.x), *cos = static_cast<const T *>(a.cos);
  const T *sin = static_cast<const T *>(a.signed_sin);
  T *out = static_cast<T *>(a.out);
  const Index n = Index(a.batch * a.heads * a.length * a.head_dim), half = Index(a.rotated / 2);
  const Index d = Index(a.head_dim), length = Index(a.length), heads = Index(a.heads), rotated = Index(a.rotated);
  for (Index i = Index(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index c = i % d, row = i / d;
    const Index t = row % length, rest = row / length, head = rest % heads, b = rest / heads;
    const int64_t in = b * a.x_strides[0] + head * a.x_strides[1] + t * a.x_strides[2];
    const int64_t to = b * a.out_strides[0] + head * a.out_strides[1] + t * a.out_strides[2];
    float v = load(x, in + c);
    if (c < rotated) {
      const Index partner = c < half ? c + half : c - half, at = t * rotated + c;
      v = v * load(cos, at) + a.sign * load(x, in + partner) * load(sin, at);
    }
    store(out, to + c, v);
  }
}

// A logit as the composed ops give it: raw / divisor, softcap * tanh(. / softcap), in the dtype.
template <class T>
__device__ __forceinline__ float transformed(float raw, float divisor, float softcap) {
  float z = divisor != 1.f ? raw / divisor : raw;
  if (softcap > 0.f) z = softcap * tanhf(z / softcap);
  return round_to<T>(z);
}

// Running (max, sum of exp(z - max)) pairs, merged.
__device__ __forceinline__ void merge(float &m, float &s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2, s = s2;
    return;
  }
  const float top = fmaxf(m, m2);
  s = s * __expf(m - top) + s2 * __expf(m2 - top);
  m = top;
}

template <class T>
__global__ void __launch_bounds__(kThreads) loss_forward_kernel(LossLaunch a) {
  __shared__ float shared_m[kThreads / 32], shared_s[kThreads / 32];
  const int64_t row = blockIdx.x;
  const T *logits = static_cast<const T *>(a.logits) + row * a.cols;
  float m = -INFINITY, s = 0;
  for (int64_t c = threadIdx.x; c < a.cols; c += blockDim.x) merge(m, s, transformed<T>(load(logits, c), a.divisor, a.softcap), 1.f);
  for (int offset = 16; offset > 0; offset /= 2)
    merge(m, s, __shfl_xor_sync(0xffffffffu, m, offset), __shfl_xor_sync(0xffffffffu, s, offset));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared_m[warp] = m, shared_s[warp] = s;
  __syncthreads();
  if (threadIdx.x != 0) return;
  m = shared_m[0], s = shared_s[0];
  for (int w = 1; w < int(blockDim.x / 32); ++w) merge(m, s, shared_m[w], shared_s[w]);
  const float lse = m + logf(s);
  a.lse[row] = lse;
  const int64_t target = a.targets[row] - a.first;
  a.loss[row] = target >= 0 && target < a.cols && a.targets[row] != -100
                    ? lse - transformed<T>(load(logits, target), a.divisor, a.softcap) : 0.f;
}

// Block (row, tile) covers kTile columns of one row: no division per element.
constexpr int64_t kTile = 4 * kThreads;

template <class T>
__global__ void __launch_bounds__(kThreads) loss_backward_kernel(LossLaunch a) {
  const int64_t row = blockIdx.x;
  T *logits = static_cast<T *>(a.logits) + row * a.cols;
  const float scale = a.row_scale[row], lse = a.lse[row];
  const int64_t target = a.targets[row] - a.first, end = min(a.cols, int64_t(blockIdx.y + 1) * kTile);
  for (int64_t c = int64_t(blockIdx.y) * kTile + threadIdx.x; c < end; c += blockDim.x) {
    const float raw = load(logits, c);
    float g = __expf(transformed<T>(raw, a.divisor, a.softcap) - lse);
    if (c == target) g -= 1.f;
    g *= scale;
    if (a.softcap > 0.f) {
      const float t = tanhf(raw / a.divisor / a.softcap);
      g *= 1.f - t * t;
    }
    store(logits, c, g / a.divisor);
  }
}

unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return unsigned(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

const char *status() {
  cudaError_t error = cudaGetLastError();
  return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}

}  // namespace

namespace cuda {

const char *rms_norm_forward(const NormLaunch &a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.bf16) norm_forward<__nv_bfloat16><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
  else norm_forward<float><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
  return status();
}

const char *rms_norm_backward(const NormBackwardLaunch &a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  const dim3 weight_grid(unsigned((a.cols + kThreads - 1) / kThreads), unsigned(a.parts));
  if (a.bf16) {
    norm_backward_rows<__nv_bfloat16><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
    if (a.dweight_parts) norm_backward_weight<__nv_bfloat16><<<weight_grid, kThreads, 0, stream>>>(a);
  } else {
    norm_backward_rows<float><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
    if (a.dweight_parts) norm_backward_weight<float><<<weight_grid, kThreads, 0, stream>>>(a);
  }
  return status();
}

const char *glu_forward(const GluLaunch &a) {
  auto stream = static_cast<cudaStream_t>(a.stream);
  const unsigned grid = grid_for(a.rows * a.cols);
  if (a.bf16) glu_forward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
  else glu_forward_kernel<float><<<grid, kThreads, 0, stream>>>(a);
  return status();
}

const char *glu_backward(const GluLaunch &a) {
  auto stream = static_cast<cudaStream_t>(a.stream);
  const unsigned grid = grid_for(a.rows * a.cols);
  if (a.bf16) glu_backward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
  else glu_backward_kernel<float><<<grid, kThreads, 0, stream>>>(a);
  return status();
}

const char *rope(const RopeLaunch &a) {
  auto stream = static_cast<cudaStream_t>(a.stream);
  const int64_t n = a.batch * a.heads * a.length * a.head_dim;
  const unsigned grid = grid_for(n);
  const bool small = n + int64_t(grid) * kThreads < (int64_t(1) << 31);
  if (a.bf16 && small) rope_kernel<__nv_bfloat16, int32_t><<<grid, kThreads, 0, stream>>>(a);
  else if (a.bf16) rope_kernel<__nv_bfloat16, int64_t><<<grid, kThreads, 0, stream>>>(a);
  else if (small) rope_kernel<float, int32_t><<<grid, kThreads, 0, stream>>>(a);
  else rope_kernel<float, int64_t><<<grid, kThreads, 0, stream>>>(a);
  return status();
}

const char *loss_forward(const LossLaunch &a) {
  if (a.rows == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  if (a.bf16) loss_forward_kernel<__nv_bfloat16><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
  else loss_forward_kernel<float><<<unsigned(a.rows), kThreads, 0, stream>>>(a);
  return status();
}

const char *loss_backward(const LossLaunch &a) {
  if (a.rows == 0 || a.cols == 0) return nullptr;
  auto stream = static_cast<cudaStream_t>(a.stream);
  const dim3 grid(unsigned(a.rows), unsigned((a.cols + kTile - 1) / kTile));
  if (a.bf16) loss_backward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(a);
  else loss_backward_kernel<float><<<grid, kThreads, 0, stream>>>(a);
  return status();
}

}  // namespace cuda
}  // namespace zf::kernels
