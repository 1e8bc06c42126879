#include "column_scores.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>

namespace topk {
namespace {

constexpr int kThreads = 256;

__device__ float to_float(float v) { return v; }
__device__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ float to_float(__half v) { return __half2float(v); }

// One block per column: elements [lo, hi) of the view (relative to its start).
template <class T>
__global__ void column_kernel(const T *grads, uint64_t view_numel, uint64_t first_element, uint64_t rows,
                              float *scores, bool squared) {
  const uint64_t column_start = first_element + uint64_t(blockIdx.x) * rows;  // may be "negative": wraps
  const int64_t start = int64_t(column_start);
  const int64_t lo = start < 0 ? 0 : start;
  const int64_t end = start + int64_t(rows), hi = end < int64_t(view_numel) ? end : int64_t(view_numel);
  float sum = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float g = to_float(grads[i]);
    sum += squared ? g * g : fabsf(g);
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  __shared__ float warp_sums[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
    scores[blockIdx.x] = total;
  }
}

template <class T>
cudaError_t launch(const zf_select_args *args, float *scores, bool squared) {
  const uint64_t begin = args->grad_offset, end = begin + args->grads.numel;
  auto stream = static_cast<cudaStream_t>(args->stream);
  uint64_t column = 0;
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    const uint64_t lo = std::max(begin, seg.offset), hi = std::min(end, seg.offset + seg.numel);
    if (lo < hi) {
      const uint64_t first = (lo - seg.offset) / seg.rows, last = (hi - seg.offset + seg.rows - 1) / seg.rows;
      // Column `first` starts at element seg.offset + first * rows of the layout, i.e. at that minus
      // `begin` in the view (before the view's start for a column that straddles it).
      const uint64_t first_element = seg.offset + first * seg.rows - begin;
      column_kernel<T><<<unsigned(last - first), kThreads, 0, stream>>>(
          static_cast<const T *>(args->grads.data), args->grads.numel, first_element, seg.rows,
          scores + column + first, squared);
    }
    column += seg.cols;
  }
  return cudaGetLastError();
}

}  // namespace

const char *cuda_column_scores(const zf_select_args *args, zf_tensor_view scores, bool squared) {
  for (uint32_t s = 0; s < args->layout->segment_count; ++s) {
    const zf_segment &seg = args->layout->segments[s];
    if ((seg.flags & ZF_SEGMENT_MATRIX) && !(seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS))
      return "GPU scoring needs column-contiguous weights (model.column_major = true)";
  }
  if (scores.device != ZF_DEVICE_CUDA) return "scores must be on the GPU with the gradients";
  auto *out = static_cast<float *>(scores.data);
  cudaError_t status;
  switch (args->grads.dtype) {
    case ZF_DTYPE_F32: status = launch<float>(args, out, squared); break;
    case ZF_DTYPE_BF16: status = launch<__nv_bfloat16>(args, out, squared); break;
    case ZF_DTYPE_F16: status = launch<__half>(args, out, squared); break;
    default: return "gradients must be fp32, bf16 or fp16";
  }
  return status == cudaSuccess ? nullptr : cudaGetErrorString(status);
}

}  // namespace topk
