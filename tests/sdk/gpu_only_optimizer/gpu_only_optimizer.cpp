// gpu_only_example: an optimizer that declares ZF_CAP_CUDA alone (a GPU-only third-party plugin),
// written against the SDK only. It never updates anything: the host refuses it before the first
// step wherever the master weights live in host memory, and its advice names the installed CPU
// optimizers instead.
#include <zf/zf_plugin.hpp>

namespace {

struct GpuOnly {};

zf_status create(const zf_host *, const zf_config *, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] { *out = reinterpret_cast<zf_object *>(new GpuOnly{}); });
}

void destroy(zf_object *object) { delete reinterpret_cast<GpuOnly *>(object); }

zf_status init_state(zf_object *, uint64_t, zf_error *) { return ZF_OK; }

zf_status step(zf_object *, const zf_optimizer_step_args *, zf_error *error) {
  return zf::fail(error, ZF_ERROR_UNSUPPORTED, "a test plugin: it never updates");
}

const zf_optimizer_api api = {.struct_size = sizeof(zf_optimizer_api),
                              .create = create,
                              .destroy = destroy,
                              .init_state = init_state,
                              .step = step};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "gpu_only_example", ZF_KIND_OPTIMIZER, 0, nullptr, "1.0.0",
    "declares CUDA alone and never updates (an out-of-tree test optimizer)", ZF_CAP_CUDA, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
