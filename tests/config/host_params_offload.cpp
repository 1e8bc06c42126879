// host_params: an offload plugin of another name that keeps the working parameters in host memory
// and writes them there in its step, as cpu_full does (the same plan and estimate). zfcore knows it
// by what it declares, not by its name: beside [zenflow] it is refused before setup as cpu_full is.
#include "../../plugins/offload/common/host_offload.hpp"

namespace {

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf_offload::create_host_offload(host, config, /*offload_params=*/true, out, error);
}

const zf_param_decl params[] = {
    ZF_HOST_OFFLOAD_PARAMS,
    ZF_OFFLOAD_PREFETCH_PARAM,
};

const zf_offload_api api = zf_offload::host_offload_api(create, zf_offload::estimate_host_offload<true>);

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "host_params", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0],
    params, "0.1.0", "test plugin: the working parameters in host memory, under another name than cpu_full",
    ZF_CAP_CPU | ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
