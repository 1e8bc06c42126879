// cpu_adagrad.cpp: the zf-optimizer-cpu_adagrad plugin: Adagrad as torch.optim.Adagrad defines it
// (L2 weight decay, lr decay by step, initial accumulator), sharing cpu_adam's kernels, pool and
// precisions. Uses the group's lr, eps and weight_decay; the betas are ignored.
#include "optimizer_entries.hpp"

namespace {

using namespace zf::cpu_kernels;

constexpr zf_param_decl kParams[] = {
    zf::param_float("initial_accumulator_value", "0", "starting value of the sum of squared gradients",
                    zf::at_least(0)),
    zf::param_float("lr_decay", "0", "effective lr = lr / (1 + (step - 1) * lr_decay)", zf::at_least(0)),
    kMomentDtypeParam,
    kSimdParam,
    kThreadsParam,
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **object,
                 zf_error *error) {
  CpuOptimizerOptions options;
  options.algorithm = Algorithm::adagrad;
  const zf_status status = zf::guard(error, [&] {
    read_common_options(host, config, &options);
    const zf::Config table(host, config);
    options.initial_accumulator = float(table.real("initial_accumulator_value"));
    options.lr_decay = table.real("lr_decay");
  });
  if (status != ZF_OK) return status;
  return create_optimizer(host, options, object, error);
}

constexpr zf_optimizer_api kApi = optimizer_api(create, estimate_state_entry<1>);  // the sum of squares

constexpr zf_descriptor kDescriptor = {
    sizeof(zf_descriptor),
    ZF_ABI_VERSION,
    "cpu_adagrad",
    ZF_KIND_OPTIMIZER,
    sizeof kParams / sizeof kParams[0],
    kParams,
    "1.0.0",
    "Adagrad on the CPU: AVX-512/AVX2/scalar by CPU, pinned threads, fused bf16/fp16 output",
    kCapabilities,
    &kApi,
};

}  // namespace

ZF_PLUGIN_DEFINE(kDescriptor)
