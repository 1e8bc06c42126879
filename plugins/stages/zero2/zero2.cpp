// zero2: zero1, and gradients are reduced during the backward so that each rank keeps only its
// own shard of them: the host (it shards the gradients, since zero2 wires reduce_block) holds one
// block's gradients at a time and reduce_block sums them into the owners' shards (BlockReducer,
// ../common/zero_shard.hpp).
#include "../common/zero_estimate.hpp"

#include <memory>

namespace {

using namespace zf::zero;

struct Zero2 {
  const zf_host *host;
  Knobs knobs;
  std::unique_ptr<Collectives> comm;  // made by plan, once the shard size is known
  std::unique_ptr<BlockReducer> block_reducer;
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (zf_status status = require_abi_1_10(host, "zero2", error); status != ZF_OK) return status;
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    *out = reinterpret_cast<zf_object *>(new Zero2{host, read_knobs(cfg), nullptr, nullptr});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Zero2 *>(object); }

zf_status plan(zf_object *object, const zf_layout *layout, zf_stage_plan *plan, zf_error *error) {
  return zf::guard(error, [&] {
    auto *self = reinterpret_cast<Zero2 *>(object);
    uint64_t shard = 0;
    plan_shard(self->host, layout, plan, &shard);
    self->comm = std::make_unique<Collectives>(self->host, shard, self->knobs);
    self->block_reducer = std::make_unique<BlockReducer>(self->host, shard, self->knobs);
  });
}

zf_status reduce_block(zf_object *object, uint32_t block, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero2 *>(object)->block_reducer->reduce_block(block, *buffers, error);
}

// The backward's reduce_block calls did the reduction (the host joined them before this).
zf_status reduce_gradients(zf_object *object, const zf_step_buffers *, zf_error *) {
  reinterpret_cast<Zero2 *>(object)->block_reducer->release_staging();
  return ZF_OK;
}

zf_status gather_parameters(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero2 *>(object)->comm->all_gather_shards(buffers->params, buffers->stream, error);
}

const zf_param_decl params[] = {ZF_ZERO_COMMON_PARAMS};

// zero1 with the gradients sharded: the shard from the backward to the update, one block's
// gradients while its backward runs, and the reduction's staging with gradient accumulation.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return estimate_with(shape, estimate, error, [](const zf_memory_shape &sh, const ShapeSums &s,
                                                  const zf::Config &table, zf_memory_estimate *e) {
    const uint64_t reduce = reduce_staging(sh, s, uint64_t(table.integer("reduce_bucket_size")));
    set_estimate(e, s.c * s.padded(), s.c * s.shard, 4 * s.shard, s.k * s.shard, reduce, s.c * s.largest,
                 2 * s.numel + 14 * s.numel / s.world,
                 "params cNS, grads cS, master 4S, state kS (paper: 2P + 14P/N)",
                 "stage.plugin = \"zero3\" also shards the parameters; more ranks divide every shard");
  });
}

// No gather_block: every rank holds every parameter.
const zf_stage_api api = {.struct_size = sizeof(zf_stage_api),
                          .create = create,
                          .destroy = destroy,
                          .plan = plan,
                          .reduce_gradients = reduce_gradients,
                          .gather_parameters = gather_parameters,
                          .reduce_block = reduce_block,
                          .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero2", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.3.0",
    "ZeRO-2: zero1 + gradients reduced block by block into their owners' shards during the backward",
    ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_SHARD_OPTIMIZER | ZF_CAP_SHARD_GRADIENTS, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
