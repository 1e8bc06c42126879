// cpu_lion.cpp: the zf-optimizer-cpu_lion plugin: Lion (Chen et al. 2023, "Symbolic Discovery of
// Optimization Algorithms") on the CPU, sharing cpu_adam's kernels, pool and precisions. Uses
// the group's lr, beta1, beta2 and weight_decay (decoupled); eps is ignored.
#include "optimizer_entries.hpp"

namespace {

using namespace zf::cpu_kernels;

constexpr zf_param_decl kParams[] = {kMomentDtypeParam, kSimdParam, kThreadsParam};

zf_status create(const zf_host *host, const zf_config *config, zf_object **object,
                 zf_error *error) {
  CpuOptimizerOptions options;
  options.algorithm = Algorithm::lion;
  const zf_status status = zf::guard(error, [&] { read_common_options(host, config, &options); });
  if (status != ZF_OK) return status;
  return create_optimizer(host, options, object, error);
}

constexpr zf_optimizer_api kApi = optimizer_api(create, estimate_state_entry<1>);  // m

constexpr zf_descriptor kDescriptor = {
    sizeof(zf_descriptor),
    ZF_ABI_VERSION,
    "cpu_lion",
    ZF_KIND_OPTIMIZER,
    sizeof kParams / sizeof kParams[0],
    kParams,
    "1.0.0",
    "Lion on the CPU: AVX-512/AVX2/scalar by CPU, pinned threads, fused bf16/fp16 output",
    kCapabilities,
    &kApi,
};

}  // namespace

ZF_PLUGIN_DEFINE(kDescriptor)
