// replica_example: the smallest data-parallel stage, written against the SDK only, that reports
// its own memory. Every rank holds everything; after the backward the gradients are summed over
// ranks in one all-reduce. estimate_memory: parameters, gradients, master and optimizer state of
// the whole model where the model computes, and no collective buffers.
#include <zf/zf_plugin.hpp>

namespace {

struct Replica {
  const zf_host *host;
};

zf_status create(const zf_host *host, const zf_config *, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] { *out = reinterpret_cast<zf_object *>(new Replica{host}); });
}

void destroy(zf_object *object) { delete reinterpret_cast<Replica *>(object); }

zf_status plan(zf_object *, const zf_layout *layout, zf_stage_plan *plan, zf_error *) {
  plan->shard_begin = 0;
  plan->shard_end = layout->numel;
  return ZF_OK;
}

zf_status reduce_gradients(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  const zf_host *host = reinterpret_cast<Replica *>(object)->host;
  if (host->world_size == 1) return ZF_OK;
  return host->all_reduce(host, buffers->grads, ZF_REDUCE_SUM, buffers->stream, error);
}

zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *e, zf_error *) {
  const uint64_t numel = zf::shape_numel(*shape);
  e->params = e->grads = shape->compute_bytes * numel;
  e->master = 4 * numel;
  e->state = shape->state_bytes * numel;
  e->tier_bytes[ZF_TIER_DEVICE] = e->params + e->grads + e->master + e->state;
  zf::set_text(e->note, "params cP, grads cP, master 4P, state kP");
  zf::set_text(e->advice, "a stage that shards the optimizer state");
  return ZF_OK;
}

const zf_stage_api api = {.struct_size = sizeof(zf_stage_api),
                          .create = create,
                          .destroy = destroy,
                          .plan = plan,
                          .reduce_gradients = reduce_gradients,
                          .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "replica_example", ZF_KIND_STAGE, 0, nullptr, "1.0.0",
    "every rank holds everything, one all-reduce after the backward (an out-of-tree test stage)",
    ZF_CAP_CPU, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
