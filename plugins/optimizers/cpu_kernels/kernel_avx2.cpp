// kernel_avx2.cpp: AVX2 + FMA + F16C kernels, 8 lanes. Compiled with those -m flags (this file
// only) and called only after simd_dispatch.cpp saw the features on the running CPU.
#include "update_kernel.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

namespace zf::cpu_kernels::avx2 {

struct Lanes {
  using V = __m256;
  static constexpr uint64_t width = 8;
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V load(const float *source) { return _mm256_loadu_ps(source); }
  static void store(float *target, V x) { _mm256_storeu_ps(target, x); }
  using H = __m128i;
  static V load_bf16(const uint16_t *source) {
    __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(source)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
  static V load_f16(const uint16_t *source) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(source)));
  }
  // Round to nearest even in integer arithmetic; NaNs become quiet NaNs.
  static H pack_bf16(V x) {
    const __m256i bits = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff))), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
    const __m256 is_nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    rounded = _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_castsi256_ps(quiet), is_nan));
    // Values fit 16 bits, so the unsigned-saturating pack is exact; fix the lane order after.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(rounded, rounded), 0x08);
    return _mm256_castsi256_si128(packed);
  }
  static H pack_f16(V x) {
    return _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store_half(uint16_t *target, H x) {
    _mm_storeu_si128(reinterpret_cast<__m128i *>(target), x);
  }
  static void stream_half(uint16_t *target, H x) {
    _mm_stream_si128(reinterpret_cast<__m128i *>(target), x);
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const void *address) {
    _mm_prefetch(static_cast<const char *>(address), _MM_HINT_T0);
  }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) { return _mm256_div_ps(a, b); }
  static V sqrt(V a) { return _mm256_sqrt_ps(a); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm256_fnmadd_ps(a, b, c); }
  static V sign(V a) {
    const V zero = _mm256_setzero_ps();
    const V positive = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_GT_OQ), _mm256_set1_ps(1.0f));
    const V negative = _mm256_and_ps(_mm256_cmp_ps(a, zero, _CMP_LT_OQ), _mm256_set1_ps(1.0f));
    return _mm256_sub_ps(positive, negative);
  }
};

#include "kernel_body.hpp"

UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out) {
  return select_kernel(algorithm, grads, moments, out);
}

}  // namespace zf::cpu_kernels::avx2

#else  // not x86-64: no AVX2 path

namespace zf::cpu_kernels::avx2 {
UpdateFn select(Algorithm, GradFormat, MomentFormat, OutFormat) { return nullptr; }
}  // namespace zf::cpu_kernels::avx2

#endif
