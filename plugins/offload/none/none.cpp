// none: nothing is offloaded. Master weights, optimizer state and gradients stay where the model
// computes (host memory on a CPU run, device memory on a GPU run); no copies.
#include <zf/zf_plugin.hpp>

namespace {

struct NoOffload {
  zf_tier tier;
};

zf_status create(const zf_host *host, const zf_config *, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] {
    zf_tier tier = host->device == ZF_DEVICE_CUDA ? ZF_TIER_DEVICE : ZF_TIER_HOST;
    *out = reinterpret_cast<zf_object *>(new NoOffload{tier});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<NoOffload *>(object); }

zf_status plan(zf_object *object, const zf_layout *, uint64_t, zf_offload_plan *plan, zf_error *) {
  zf_tier tier = reinterpret_cast<NoOffload *>(object)->tier;
  plan->master_tier = plan->state_tier = plan->grad_tier = tier;
  return ZF_OK;
}

// Everything the stage holds stays where the model computes.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  if (!shape->stage) return zf::fail(error, ZF_DECLINED, "the stage gives no estimate");
  estimate->tier_bytes[ZF_TIER_DEVICE] = shape->stage->tier_bytes[ZF_TIER_DEVICE];
  zf::set_text(estimate->advice, "on a GPU run offload.plugin = \"cpu_optimizer\" puts the master and optimizer "
                                 "state in host memory");
  return ZF_OK;
}

// No transfers: master, state and gradients stay where the model is.
const zf_offload_api api = {.struct_size = sizeof(zf_offload_api),
                            .create = create,
                            .destroy = destroy,
                            .plan = plan,
                            .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {.struct_size = sizeof(zf_descriptor),
                                  .abi_version = ZF_ABI_VERSION,
                                  .name = "none",
                                  .kind = ZF_KIND_OFFLOAD,
                                  .version = "0.1.0",
                                  .description = "no offload: everything stays on the compute device",
                                  .capabilities = ZF_CAP_CPU | ZF_CAP_CUDA,
                                  .api = &api};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
