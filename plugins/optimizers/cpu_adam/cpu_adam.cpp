// cpu_adam.cpp: the zf-optimizer-cpu_adam plugin: Adam / AdamW on the CPU with run-time ISA
// dispatch, a pinned worker pool and asynchronous steps. The math lives in cpu_kernels/.
#include "optimizer_entries.hpp"

namespace {

using namespace zf::cpu_kernels;

constexpr zf_param_decl kParams[] = {
    zf::param_bool("adam_w_mode", "true",
                   "true: AdamW (decoupled weight decay, p *= 1 - lr wd); false: Adam (L2, g += wd p)"),
    kMomentDtypeParam,
    kSimdParam,
    kThreadsParam,
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **object,
                 zf_error *error) {
  CpuOptimizerOptions options;
  const zf_status status = zf::guard(error, [&] {
    read_common_options(host, config, &options);
    options.algorithm =
        zf::Config(host, config).boolean("adam_w_mode") ? Algorithm::adamw : Algorithm::adam;
  });
  if (status != ZF_OK) return status;
  return create_optimizer(host, options, object, error);
}

constexpr zf_optimizer_api kApi = optimizer_api(create, estimate_state_entry<2>);  // m and v

constexpr zf_descriptor kDescriptor = {
    sizeof(zf_descriptor),
    ZF_ABI_VERSION,
    "cpu_adam",
    ZF_KIND_OPTIMIZER,
    sizeof kParams / sizeof kParams[0],
    kParams,
    "1.0.0",
    "Adam/AdamW on the CPU: AVX-512/AVX2/scalar by CPU, pinned threads, fused bf16/fp16 output",
    kCapabilities,
    &kApi,
};

}  // namespace

ZF_PLUGIN_DEFINE(kDescriptor)
