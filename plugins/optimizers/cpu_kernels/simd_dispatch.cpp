// simd_dispatch.cpp: which kernel table the running CPU can use. One binary runs on every
// x86-64: the AVX2/AVX-512 tables are only ever called after the CPU reported their features.
#include <cstdlib>

#include "update_kernel.hpp"

namespace zf::cpu_kernels {

namespace {

// ZF_SIMD_MAX=avx2|scalar caps the levels treated as present (as ATEN_CPU_CAPABILITY does for
// torch): to compare paths on one machine, or to step around a CPU erratum.
SimdLevel simd_cap() {
  const char *text = std::getenv("ZF_SIMD_MAX");
  if (!text) return SimdLevel::avx512;
  const std::string cap = text;
  if (cap == "scalar") return SimdLevel::scalar;
  if (cap == "avx2") return SimdLevel::avx2;
  return SimdLevel::avx512;
}

bool cpu_has(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return true;
#if defined(__x86_64__)
    case SimdLevel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("f16c");
    case SimdLevel::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#else
    case SimdLevel::avx2:
    case SimdLevel::avx512: return false;
#endif
  }
  return false;
}

}  // namespace

const char *simd_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::scalar: return "scalar";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::avx512: return "avx512";
  }
  return "unknown";
}

bool simd_supported(SimdLevel level) { return int(level) <= int(simd_cap()) && cpu_has(level); }

SimdLevel best_simd_level() {
  if (simd_supported(SimdLevel::avx512)) return SimdLevel::avx512;
  if (simd_supported(SimdLevel::avx2)) return SimdLevel::avx2;
  return SimdLevel::scalar;
}

bool parse_simd_level(const std::string &name, SimdLevel *level) {
  if (name == "auto")
    *level = best_simd_level();
  else if (name == "avx512")
    *level = SimdLevel::avx512;
  else if (name == "avx2")
    *level = SimdLevel::avx2;
  else if (name == "scalar")
    *level = SimdLevel::scalar;
  else
    return false;
  return true;
}

bool software_prefetch_default() {
  if (const char *text = std::getenv("ZF_CPU_PREFETCH")) return std::string(text) != "0";
#if defined(__x86_64__)
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}

UpdateFn select_update_kernel(SimdLevel level, Algorithm algorithm, GradFormat grads,
                              MomentFormat moments, OutFormat out) {
  switch (level) {
    case SimdLevel::avx512: return avx512::select(algorithm, grads, moments, out);
    case SimdLevel::avx2: return avx2::select(algorithm, grads, moments, out);
    case SimdLevel::scalar: break;
  }
  return scalar::select(algorithm, grads, moments, out);
}

}  // namespace zf::cpu_kernels
