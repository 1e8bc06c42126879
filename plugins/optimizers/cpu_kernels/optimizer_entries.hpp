// optimizer_entries.hpp: the zf_optimizer_api entries every CPU optimizer plugin shares (they
// forward to CpuOptimizer behind zf::guard, so no exception crosses the ABI), the declared
// parameters they share (simd, threads, moment_dtype) and the reading of those parameters.
#pragma once

#include <zf/zf_plugin.hpp>

#include "cpu_optimizer.hpp"

namespace zf::cpu_kernels {

// Declarations shared by the plugins' parameter tables.
inline constexpr zf_param_decl kSimdParam =
    zf::param_string("simd", "auto", "kernel instruction set: auto picks the best this CPU has; a forced one it lacks declines",
                     "auto|avx512|avx2|scalar");
inline constexpr zf_param_decl kThreadsParam = zf::param_int(
    "threads", "0", "worker threads, pinned to the host's worker cores; 0 = one per worker core", zf::between(0, 1024));
inline constexpr zf_param_decl kMomentDtypeParam =
    zf::param_string("moment_dtype", "f32",
                     "optimizer state precision; bf16 halves state memory and traffic but changes the numerics "
                     "(moments rounded to bf16 every step)",
                     "f32|bf16");

// Reads simd, threads and moment_dtype from config into options. A forced simd level the CPU
// lacks throws Failure(ZF_DECLINED) with a message saying what to set instead.
void read_common_options(const zf_host *host, const zf_config *config,
                         CpuOptimizerOptions *options);

// Creates the object for create entries (behind zf::guard).
zf_status create_optimizer(const zf_host *host, const CpuOptimizerOptions &options,
                           zf_object **object, zf_error *error);

void destroy_optimizer(zf_object *object);
zf_status init_state_entry(zf_object *object, uint64_t numel, zf_error *error);
zf_status step_entry(zf_object *object, const zf_optimizer_step_args *args, zf_error *error);
zf_status submit_entry(zf_object *object, const zf_optimizer_step_args *args, zf_error *error);
zf_status wait_entry(zf_object *object, zf_error *error);
zf_status state_tensor_entry(zf_object *object, uint32_t index, const char **name,
                             zf_tensor_view *view, zf_error *error);
zf_status state_spec_entry(zf_object *object, uint32_t index, const char **name, zf_dtype *dtype,
                           zf_error *error);
zf_status bind_state_entry(zf_object *object, uint64_t numel, const zf_tensor_view *state,
                           uint32_t count, zf_error *error);

// estimate_memory (ABI 1.9): kTensors state tensors an element, in moment_dtype.
template <uint64_t kTensors>
zf_status estimate_state_entry(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return zf::guard(error, [&] {
    const uint64_t element = zf::Config(shape).string("moment_dtype") == "bf16" ? 2 : 4;
    estimate->state = kTensors * element * zf::shape_numel(*shape);
  });
}

// The table with every entry wired; plugins supply create and their estimate (estimate_state_entry).
constexpr zf_optimizer_api optimizer_api(zf_status (*create)(const zf_host *, const zf_config *,
                                                             zf_object **, zf_error *),
                                         zf_estimate_memory_fn estimate) {
  return zf_optimizer_api{.struct_size = sizeof(zf_optimizer_api),
                          .create = create,
                          .destroy = destroy_optimizer,
                          .init_state = init_state_entry,
                          .step = step_entry,
                          .submit = submit_entry,
                          .wait = wait_entry,
                          .state_tensor = state_tensor_entry,
                          .state_spec = state_spec_entry,
                          .bind_state = bind_state_entry,
                          .estimate_memory = estimate};
}

constexpr uint64_t kCapabilities = ZF_CAP_CPU | ZF_CAP_ASYNC | ZF_CAP_LOW_PRECISION_OUT;

}  // namespace zf::cpu_kernels
