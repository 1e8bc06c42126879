// zero1: optimizer-state sharding. Rank r owns 1/N of the fp32 master parameters and optimizer
// state (the engine allocates only the planned shard). Gradients are all-reduced in buckets as in
// zero0 (during the backward with overlap_comm), each rank updates its shard, and the updated
// parameters are all-gathered in place.
#include "../common/zero_estimate.hpp"

#include <memory>

namespace {

using namespace zf::zero;

struct Zero1 {
  const zf_host *host;
  Knobs knobs;
  std::unique_ptr<Collectives> comm;  // made by plan, once the shard size is known
  std::unique_ptr<BackwardReducer> reducer;
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (zf_status status = require_abi_1_10(host, "zero1", error); status != ZF_OK) return status;
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    *out = reinterpret_cast<zf_object *>(new Zero1{host, read_knobs(cfg), nullptr, nullptr});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Zero1 *>(object); }

zf_status plan(zf_object *object, const zf_layout *layout, zf_stage_plan *plan, zf_error *error) {
  return zf::guard(error, [&] {
    auto *self = reinterpret_cast<Zero1 *>(object);
    uint64_t shard = 0;
    plan_shard(self->host, layout, plan, &shard);
    self->comm = std::make_unique<Collectives>(self->host, shard, self->knobs);
    self->reducer = std::make_unique<BackwardReducer>(self->host, *self->comm, self->knobs);
  });
}

zf_status after_backward(zf_object *object, uint32_t block, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero1 *>(object)->reducer->after_backward(block, *buffers, error);
}

zf_status reduce_gradients(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero1 *>(object)->reducer->finish(*buffers, error);
}

zf_status gather_parameters(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero1 *>(object)->comm->all_gather_shards(buffers->params, buffers->stream, error);
}

const zf_param_decl params[] = {ZF_ZERO_COMMON_PARAMS};

// The master and the state sharded; the flat buffers padded to N shards (the all-gather needs no staging).
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return estimate_with(shape, estimate, error, [](const zf_memory_shape &, const ShapeSums &s, const zf::Config &,
                                                  zf_memory_estimate *e) {
    set_estimate(e, s.c * s.padded(), s.c * s.padded(), 4 * s.shard, s.k * s.shard, 0, 0,
                 4 * s.numel + 12 * s.numel / s.world,
                 "params cNS, grads cNS, master 4S, state kS (paper: 4P + 12P/N)",
                 "stage.plugin = \"zero2\" also shards the gradients, \"zero3\" the parameters too; more ranks "
                 "divide the master and optimizer state");
  });
}

// No gather_block: every rank holds every parameter.
const zf_stage_api api = {.struct_size = sizeof(zf_stage_api),
                          .create = create,
                          .destroy = destroy,
                          .plan = plan,
                          .after_backward = after_backward,
                          .reduce_gradients = reduce_gradients,
                          .gather_parameters = gather_parameters,
                          .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero1", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.3.0",
    "ZeRO-1: fp32 master and optimizer state sharded; gradients all-reduced, parameters all-gathered",
    ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_SHARD_OPTIMIZER, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
