// The fused AdamW kernel (adam_kernel.hpp). Each block updates one tile of one range; it finds
// the range by binary search over the tile prefix table. The arithmetic follows adamw_ref (and
// torch.optim.AdamW) operation by operation, in fp32.
#include "adam_kernel.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

namespace gpu_adam {
namespace {

constexpr int kThreads = 256;

template <class T> __device__ float load(const T *data, uint64_t i);
template <> __device__ float load<float>(const float *data, uint64_t i) { return data[i]; }
template <> __device__ float load<__nv_bfloat16>(const __nv_bfloat16 *data, uint64_t i) { return __bfloat162float(data[i]); }
template <> __device__ float load<__half>(const __half *data, uint64_t i) { return __half2float(data[i]); }

struct NoOutput {};
template <class T> __device__ void store(T *data, uint64_t i, float value);
template <> __device__ void store<NoOutput>(NoOutput *, uint64_t, float) {}
template <> __device__ void store<__nv_bfloat16>(__nv_bfloat16 *data, uint64_t i, float value) { data[i] = __float2bfloat16_rn(value); }
template <> __device__ void store<__half>(__half *data, uint64_t i, float value) { data[i] = __float2half_rn(value); }

template <class Grad, class Out>
__global__ void __launch_bounds__(kThreads) adam_kernel(Launch a) {
  __shared__ uint32_t range_index;
  const uint64_t tile = blockIdx.x;
  if (threadIdx.x == 0) {
    uint32_t lo = 0, hi = a.range_count;  // last range whose first tile <= tile
    while (hi - lo > 1) {
      uint32_t mid = (lo + hi) / 2;
      if (a.first_tile[mid] <= tile) lo = mid;
      else hi = mid;
    }
    range_index = lo;
  }
  __syncthreads();
  const Range range = a.ranges[range_index];
  const Group g = a.groups[range.group];
  const uint64_t begin = range.begin + (tile - a.first_tile[range_index]) * kTile;
  const uint64_t end = begin + kTile < range.end ? begin + kTile : range.end;
  const auto *grads = static_cast<const Grad *>(a.grads);
  auto *out = static_cast<Out *>(a.params_out);
  for (uint64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    float grad = load<Grad>(grads, i) * a.grad_scale;
    float param = a.params[i];
    if (a.decoupled) param *= 1.0f - g.lr * g.weight_decay;
    else grad += g.weight_decay * param;
    float m = a.exp_avg[i];
    m = m + (1.0f - g.beta1) * (grad - m);
    float v = a.exp_avg_sq[i] * g.beta2 + (1.0f - g.beta2) * grad * grad;
    float denom = sqrtf(v) / g.bias_correction2_sqrt + g.eps;
    param -= g.step_size * (m / denom);
    a.exp_avg[i] = m;
    a.exp_avg_sq[i] = v;
    a.params[i] = param;
    store<Out>(out, i, param);
  }
}

template <class Grad>
void launch_for_grad(const Launch &a, dim3 grid, cudaStream_t stream) {
  switch (a.out_precision) {
    case Precision::bf16: adam_kernel<Grad, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(a); break;
    case Precision::f16: adam_kernel<Grad, __half><<<grid, kThreads, 0, stream>>>(a); break;
    default: adam_kernel<Grad, NoOutput><<<grid, kThreads, 0, stream>>>(a); break;
  }
}

}  // namespace

const char *launch_adam(const Launch &a) {
  if (a.tile_count == 0) return nullptr;
  if (a.tile_count > 0x7fffffffull) return "too many tiles for one launch";
  dim3 grid(static_cast<unsigned>(a.tile_count));
  auto stream = static_cast<cudaStream_t>(a.stream);
  switch (a.grad_precision) {
    case Precision::f32: launch_for_grad<float>(a, grid, stream); break;
    case Precision::bf16: launch_for_grad<__nv_bfloat16>(a, grid, stream); break;
    case Precision::f16: launch_for_grad<__half>(a, grid, stream); break;
    default: return "unsupported gradient precision";
  }
  cudaError_t status = cudaGetLastError();
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

}  // namespace gpu_adam
