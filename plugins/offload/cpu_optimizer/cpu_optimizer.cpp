// cpu_optimizer: ZeRO-Offload's strategy. The fp32 master and the optimizer state of this rank's
// shard live in pinned host memory and a CPU optimizer (cpu_adam, cpu_lion, cpu_adagrad) updates
// them. Gradients come down bucket by bucket as the backward finishes them (one stream), updated
// parameters go up bucket by bucket as the CPU finishes them (another stream), so both PCIe
// directions, the backward and the CPU update overlap. On a CPU run the "device" is host memory:
// the same buckets, copies and ordering run, which is how CI tests the schedule.
#include "../common/host_offload.hpp"

namespace {

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf_offload::create_host_offload(host, config, /*offload_params=*/false, out, error);
}

const zf_param_decl params[] = {ZF_HOST_OFFLOAD_PARAMS, ZF_OFFLOAD_RATIO_PARAM};

zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  zf_status status = zf_offload::estimate_host_offload<false>(shape, estimate, error);
  zf::set_text(estimate->advice, "offload.plugin = \"nvme\" puts the optimizer state on disk, \"cpu_full\" the "
                                 "working parameters in host memory too");
  return status;
}

const zf_offload_api api = zf_offload::host_offload_api(create, estimate_memory);

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "cpu_optimizer", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0],
    params, "1.0.0",
    "ZeRO-Offload: fp32 master and optimizer state in pinned host memory, updated by a CPU optimizer, "
    "per-bucket copies overlapping the backward",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
