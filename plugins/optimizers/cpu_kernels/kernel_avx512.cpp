// kernel_avx512.cpp: AVX-512 (F, BW, VL) kernels, 16 lanes. Compiled with those -m flags (this
// file only) and called only after simd_dispatch.cpp saw the features on the running CPU. bf16 is
// converted in integer arithmetic, so avx512_bf16 is not required.
#include "update_kernel.hpp"

#if defined(__x86_64__)
#include <immintrin.h>

namespace zf::cpu_kernels::avx512 {

struct Lanes {
  using V = __m512;
  static constexpr uint64_t width = 16;
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V load(const float *source) { return _mm512_loadu_ps(source); }
  static void store(float *target, V x) { _mm512_storeu_ps(target, x); }
  using H = __m256i;
  static V load_bf16(const uint16_t *source) {
    __m512i wide =
        _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(source)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
  }
  static V load_f16(const uint16_t *source) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(source)));
  }
  // Round to nearest even in integer arithmetic; NaNs become quiet NaNs.
  static H pack_bf16(V x) {
    const __m512i bits = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(
        _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff))), 16);
    const __mmask16 is_nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    rounded = _mm512_mask_mov_epi32(
        rounded, is_nan, _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40)));
    return _mm512_cvtepi32_epi16(rounded);
  }
  static H pack_f16(V x) {
    return _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static void store_half(uint16_t *target, H x) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(target), x);
  }
  static void stream_half(uint16_t *target, H x) {
    _mm256_stream_si256(reinterpret_cast<__m256i *>(target), x);
  }
  static void fence() { _mm_sfence(); }
  static void prefetch(const void *address) {
    _mm_prefetch(static_cast<const char *>(address), _MM_HINT_T0);
  }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) { return _mm512_div_ps(a, b); }
  static V sqrt(V a) { return _mm512_sqrt_ps(a); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static V sign(V a) {
    const V zero = _mm512_setzero_ps();
    const V one = _mm512_set1_ps(1.0f);
    V result = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), one);
    return _mm512_mask_mov_ps(result, _mm512_cmp_ps_mask(a, zero, _CMP_LT_OQ),
                              _mm512_set1_ps(-1.0f));
  }
};

#include "kernel_body.hpp"

UpdateFn select(Algorithm algorithm, GradFormat grads, MomentFormat moments, OutFormat out) {
  return select_kernel(algorithm, grads, moments, out);
}

}  // namespace zf::cpu_kernels::avx512

#else  // not x86-64: no AVX-512 path

namespace zf::cpu_kernels::avx512 {
UpdateFn select(Algorithm, GradFormat, MomentFormat, OutFormat) { return nullptr; }
}  // namespace zf::cpu_kernels::avx512

#endif
