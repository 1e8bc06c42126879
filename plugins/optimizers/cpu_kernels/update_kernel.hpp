// update_kernel.hpp: the interface between the CPU optimizer object and its per-ISA kernels.
//
// Defines: Algorithm (Adam, AdamW, Lion, Adagrad), the storage formats of gradients, moments and
// the low-precision parameter copy, GroupCoefficients (one group's hyperparameters with the
// step-dependent factors folded in, computed once per step in double), UpdateOperands (the
// buffers of one step), UpdateFn (updates elements [begin, end) of them) and SimdLevel with the
// run-time dispatch that picks an UpdateFn for the CPU we run on.
//
// Every element goes through the same instructions whatever [begin, end) is (tails are staged
// through a full-width vector), so any chunking of a step gives bit-identical results.
#pragma once

#include <cstdint>
#include <string>

namespace zf::cpu_kernels {

enum class Algorithm { adam, adamw, lion, adagrad };
enum class GradFormat { f32, bf16, f16 };
enum class MomentFormat { f32, bf16 };
enum class OutFormat { none, bf16, f16 };

// Broadcast once per chunk by the kernels; floats because the vector math is fp32.
struct GroupCoefficients {
  float grad_scale;
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float eps;
  float l2;         // Adam/Adagrad: g += l2 * p (0 for the decoupled variants)
  float decay;      // AdamW/Lion: p *= decay = 1 - lr * weight_decay (1 otherwise)
  float step_size;  // Adam(W): lr / (1 - beta1^t); Lion: lr; Adagrad: lr / (1 + (t-1) lr_decay)
  float bias_correction2_sqrt;  // Adam(W): sqrt(1 - beta2^t); 1 otherwise
};

// Base pointers of a step, indexed by the flat-buffer element; absent state is nullptr.
// m: Adam's exp_avg, Lion's momentum. v: Adam's exp_avg_sq, Adagrad's sum of squares.
struct UpdateOperands {
  float *params;
  const void *grads;
  void *m;
  void *v;
  void *params_out;
  bool prefetch;  // software prefetch ahead of the loads (see software_prefetch_default)
};

using UpdateFn = void (*)(const UpdateOperands &operands, const GroupCoefficients &coefficients,
                          uint64_t begin, uint64_t end);

enum class SimdLevel { scalar, avx2, avx512 };

const char *simd_name(SimdLevel level);  // "scalar", "avx2", "avx512"
// The best level this CPU and build support.
SimdLevel best_simd_level();
// Whether this CPU and build can run level (scalar always). The environment variable
// ZF_SIMD_MAX=avx2|scalar caps it, so a path can be tested or avoided on a bigger CPU.
bool simd_supported(SimdLevel level);
// Parses "auto" | "avx512" | "avx2" | "scalar"; "auto" becomes best_simd_level(). Returns false
// for an unknown name.
bool parse_simd_level(const std::string &name, SimdLevel *level);

// Whether the kernels should prefetch in software: on Intel cores the hardware prefetchers leave
// ~15% of the bandwidth unused with 4-5 streams per core; on AMD Zen the same prefetches cost
// ~15% (both measured on the Adam loop). ZF_CPU_PREFETCH=0|1 overrides, for tuning.
bool software_prefetch_default();

// The kernel for one combination; never nullptr for a supported level.
UpdateFn select_update_kernel(SimdLevel level, Algorithm algorithm, GradFormat grads,
                              MomentFormat moments, OutFormat out);

// One table per ISA translation unit (kernel_scalar.cpp, kernel_avx2.cpp, kernel_avx512.cpp).
namespace scalar {
UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out);
}
namespace avx2 {
UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out);
}
namespace avx512 {
UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out);
}

}  // namespace zf::cpu_kernels
