// cpu_full: cpu_optimizer plus the parameters. The bf16/fp16 working parameters live in pinned
// host memory beside the fp32 master and the optimizer state; the host copies each block to the
// GPU before its forward and backward (the next blocks ahead, up to prefetch_size elements, while
// the current one computes) and frees it after, as ZeRO-3 does with a gathered block. The CPU
// optimizer writes the updated parameters straight into host memory, so nothing goes up after the
// step. GPU memory holds the activations, the gradients and a few blocks; under zero3 each rank
// keeps only its shard of the parameters in host memory.
#include "../common/host_offload.hpp"

namespace {

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf_offload::create_host_offload(host, config, /*offload_params=*/true, out, error);
}

const zf_param_decl params[] = {
    ZF_HOST_OFFLOAD_PARAMS,
    ZF_OFFLOAD_PREFETCH_PARAM,
};

zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  zf_status status = zf_offload::estimate_host_offload<true>(shape, estimate, error);
  zf::set_text(estimate->note, "device: plus offload.prefetch_size elements copied ahead");
  zf::set_text(estimate->advice, "offload.plugin = \"nvme\" puts the optimizer state on disk");
  return status;
}

const zf_offload_api api = zf_offload::host_offload_api(create, estimate_memory);

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "cpu_full", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0],
    params, "1.0.0",
    "ZeRO-Offload plus parameter offload: master, optimizer state and the working parameters in pinned host "
    "memory, each block streamed to the GPU around its use",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
