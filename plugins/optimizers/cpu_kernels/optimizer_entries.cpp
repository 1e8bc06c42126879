#include "optimizer_entries.hpp"

#include <cstdlib>
#include <string>

namespace zf::cpu_kernels {

void read_common_options(const zf_host *host, const zf_config *config,
                         CpuOptimizerOptions *options) {
  const Config table(host, config);
  const std::string simd = table.string("simd");
  if (!parse_simd_level(simd, &options->simd))
    throw Failure(ZF_ERROR_INVALID_ARGUMENT,
                  "simd = \"" + simd + "\": expected auto, avx512, avx2 or scalar");
  if (!simd_supported(options->simd))
    throw Failure(
        ZF_DECLINED,
        "simd = \"" + simd + "\" but this CPU (or build) lacks " +
            (options->simd == SimdLevel::avx512 ? "avx512f/avx512bw/avx512vl" : "avx2/fma/f16c") +
            (std::getenv("ZF_SIMD_MAX") ? " (or ZF_SIMD_MAX caps it)" : "") +
            "; set simd = \"auto\" (best available here: " + simd_name(best_simd_level()) + ")");
  options->threads = unsigned(table.integer("threads"));
  const std::string moments = table.string("moment_dtype");
  options->moments = moments == "bf16" ? MomentFormat::bf16 : MomentFormat::f32;
}

namespace {
CpuOptimizer &self(zf_object *object) { return *reinterpret_cast<CpuOptimizer *>(object); }
}  // namespace

zf_status create_optimizer(const zf_host *host, const CpuOptimizerOptions &options,
                           zf_object **object, zf_error *error) {
  return guard(error,
               [&] { *object = reinterpret_cast<zf_object *>(new CpuOptimizer(host, options)); });
}

void destroy_optimizer(zf_object *object) { delete reinterpret_cast<CpuOptimizer *>(object); }

zf_status init_state_entry(zf_object *object, uint64_t numel, zf_error *error) {
  return guard(error, [&] { self(object).init_state(numel); });
}

zf_status step_entry(zf_object *object, const zf_optimizer_step_args *args, zf_error *error) {
  return guard(error, [&] {
    self(object).submit(*args);
    self(object).wait();
  });
}

zf_status submit_entry(zf_object *object, const zf_optimizer_step_args *args, zf_error *error) {
  return guard(error, [&] { self(object).submit(*args); });
}

zf_status wait_entry(zf_object *object, zf_error *error) {
  return guard(error, [&] { self(object).wait(); });
}

zf_status state_spec_entry(zf_object *object, uint32_t index, const char **name, zf_dtype *dtype,
                           zf_error *error) {
  return guard(error, [&]() -> zf_status {
    return self(object).state_spec(index, name, dtype) ? ZF_OK : ZF_DECLINED;
  });
}

zf_status bind_state_entry(zf_object *object, uint64_t numel, const zf_tensor_view *state,
                           uint32_t count, zf_error *error) {
  return guard(error, [&] { self(object).bind_state(numel, state, count); });
}

zf_status state_tensor_entry(zf_object *object, uint32_t index, const char **name,
                             zf_tensor_view *view, zf_error *error) {
  return guard(error, [&]() -> zf_status {
    return self(object).state_tensor(index, name, view) ? ZF_OK : ZF_DECLINED;
  });
}

}  // namespace zf::cpu_kernels
