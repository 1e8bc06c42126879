// adam_kernel.hpp: the fused AdamW launch of gpu_adam. One kernel reads fp32 master, gradient
// (fp32/bf16/fp16) and both moments once, and writes master, moments and, when asked, the
// low-precision working parameters in the same pass. Plain C++ types only, so the plugin's
// host code needs no CUDA compiler.
#pragma once

#include <cstdint>

namespace gpu_adam {

constexpr uint32_t kMaxGroups = 8;
constexpr uint64_t kTile = 4096;  // elements per CUDA block

enum class Precision : int { none = 0, f32 = 1, bf16 = 2, f16 = 3 };

struct Range {  // a run of elements with one set of hyper-parameters (device copy of the ranges)
  uint64_t begin, end;
  uint32_t group, pad;
};

struct Group {
  float lr, beta1, beta2, eps, weight_decay;
  float step_size;              // lr / (1 - beta1^step)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
};

struct Launch {
  float *params;
  const void *grads;
  Precision grad_precision;
  float *exp_avg, *exp_avg_sq;
  void *params_out;  // nullptr or bf16/fp16
  Precision out_precision;
  const Range *ranges;         // device, range_count entries
  const uint64_t *first_tile;  // device, range_count + 1 entries: tiles before each range
  uint32_t range_count;
  uint64_t tile_count;
  Group groups[kMaxGroups];
  float grad_scale;
  bool decoupled;  // AdamW (true) or Adam with L2 decay
  void *stream;    // cudaStream_t
};

// Enqueues the update on launch.stream; returns a CUDA error string or nullptr.
const char *launch_adam(const Launch &launch);

}  // namespace gpu_adam
