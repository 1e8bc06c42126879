// kernel_scalar.cpp: the portable kernels (any CPU, the only path on non-x86 builds). Built with
// -ffp-contract=off so that a*b+c means two roundings everywhere, whatever the target.
#include <cmath>
#include <zf/zf_plugin.hpp>  // the SDK's scalar bf16/fp16 conversions

#include "update_kernel.hpp"

namespace zf::cpu_kernels::scalar {

struct Lanes {
  using V = float;
  static constexpr uint64_t width = 1;
  static V set1(float x) { return x; }
  static V load(const float *source) { return *source; }
  static void store(float *target, V x) { *target = x; }
  using H = uint16_t;
  static V load_bf16(const uint16_t *source) { return zf::bf16_to_float(*source); }
  static V load_f16(const uint16_t *source) { return zf::f16_to_float(*source); }
  static H pack_bf16(V x) { return zf::float_to_bf16(x); }
  static H pack_f16(V x) { return zf::float_to_f16(x); }
  static void store_half(uint16_t *target, H x) { *target = x; }
  static void stream_half(uint16_t *target, H x) { *target = x; }
  static void fence() {}
  static void prefetch(const void *) {}
  static V add(V a, V b) { return a + b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V sqrt(V a) { return std::sqrt(a); }
  static V fmadd(V a, V b, V c) { return a * b + c; }   // a*b + c
  static V fnmadd(V a, V b, V c) { return c - a * b; }  // c - a*b
  static V sign(V a) { return a > 0.0f ? 1.0f : (a < 0.0f ? -1.0f : 0.0f); }
};

#include "kernel_body.hpp"

UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out) {
  return select_kernel(algorithm, grads, moments, out);
}

}  // namespace zf::cpu_kernels::scalar
