// zero3: zero2 (gradients reduced block by block into the owners' shards), and the
// compute-precision parameters themselves are sharded. Each rank keeps its
// shard of the flat parameter buffer; the host holds a block's parameters only while the block
// computes and asks this stage to fill them (gather_block) before the block's forward and again
// before its backward. Blocks smaller than param_persistence_threshold elements stay resident
// (gathered after every optimizer step), as long as all resident blocks together stay within
// max_live_parameters.
//
// A block's range crosses the shards of one or more ranks, unevenly; each owner broadcasts its
// part straight into the block storage (in allgather_bucket_size pieces), so no staging is needed.
// On a GPU the host gathers the next blocks (up to prefetch_bucket_size elements, at least one)
// on its communication stream while the current block computes; on CPU the collectives block,
// so the host does not prefetch there.
#include "../common/zero_estimate.hpp"

#include <memory>

namespace {

using namespace zf::zero;

struct Zero3 {
  const zf_host *host;
  Knobs knobs;
  uint64_t persistence_threshold;
  uint64_t max_live;
  uint64_t prefetch;
  std::unique_ptr<BlockReducer> block_reducer;
  uint64_t shard = 0;
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (zf_status status = require_abi_1_2(host, "zero3", error); status != ZF_OK) return status;
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    *out = reinterpret_cast<zf_object *>(new Zero3{host, read_knobs(cfg), uint64_t(cfg.integer("param_persistence_threshold")),
                                                   uint64_t(cfg.integer("max_live_parameters")),
                                                   uint64_t(cfg.integer("prefetch_bucket_size")), nullptr, 0});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Zero3 *>(object); }

zf_status plan(zf_object *object, const zf_layout *layout, zf_stage_plan *plan, zf_error *error) {
  auto *self = reinterpret_cast<Zero3 *>(object);
  if (plan->struct_size < offsetof(zf_stage_plan, block_resident) + sizeof(uint8_t *) || !plan->block_resident)
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "zero3 needs a host with plugin ABI 1.1 or newer (block residency)");
  return zf::guard(error, [&] {
    plan_shard(self->host, layout, plan, &self->shard);
    self->block_reducer = std::make_unique<BlockReducer>(self->host, self->shard, self->knobs);
    if (plan->struct_size >= offsetof(zf_stage_plan, prefetch_numel) + sizeof(uint64_t))
      plan->prefetch_numel = self->prefetch;
    uint64_t live = 0, resident_blocks = 0;
    for (uint32_t b = 0; b < layout->block_count; ++b) {
      uint64_t numel = layout->blocks[b].numel;
      bool keep = numel < self->persistence_threshold && live + numel <= self->max_live;
      plan->block_resident[b] = keep ? 1 : 0;
      if (keep) live += numel, ++resident_blocks;
    }
    zf::log(self->host, ZF_LOG_INFO, "%llu of %u blocks resident (%llu elements), the others gathered per use",
            (unsigned long long)resident_blocks, layout->block_count, (unsigned long long)live);
  });
}

zf_status gather_block(zf_object *object, uint32_t block, const zf_step_buffers *buffers, zf_error *error) {
  auto *self = reinterpret_cast<Zero3 *>(object);
  if (buffers->struct_size < offsetof(zf_step_buffers, block_params) + sizeof(zf_tensor_view))
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "zero3 needs a host with plugin ABI 1.1 or newer");
  const zf_block &b = buffers->layout->blocks[block];
  const zf_tensor_view &shard = buffers->param_shard;
  const zf_tensor_view &out = buffers->block_params;
  uint64_t world = uint64_t(self->host->world_size), rank = uint64_t(self->host->rank);
  uint64_t piece = std::max<uint64_t>(1, self->knobs.allgather_bucket_size);
  for (uint64_t owner = b.offset / self->shard; owner < world && owner * self->shard < b.offset + b.numel; ++owner) {
    uint64_t lo = std::max(b.offset, owner * self->shard);
    uint64_t hi = std::min(b.offset + b.numel, (owner + 1) * self->shard);
    zf_tensor_view part = view_at(out, element_at(out, lo - b.offset), hi - lo);
    zf_status status = ZF_OK;
    if (owner == rank)
      status = copy(self->host, part, view_at(shard, element_at(shard, lo - owner * self->shard), hi - lo),
                    buffers->stream, error);
    for (uint64_t at = lo; at < hi && world > 1 && status == ZF_OK; at += piece) {
      zf_tensor_view bucket = view_at(out, element_at(out, at - b.offset), std::min(piece, hi - at));
      status = self->host->broadcast(self->host, bucket, int32_t(owner), buffers->stream, error);
    }
    if (status != ZF_OK) return status;
  }
  return ZF_OK;
}

zf_status reduce_block(zf_object *object, uint32_t block, const zf_step_buffers *buffers, zf_error *error) {
  return reinterpret_cast<Zero3 *>(object)->block_reducer->reduce_block(block, *buffers, error);
}

// The backward's reduce_block calls did the reduction (the host joined them before this).
zf_status reduce_gradients(zf_object *object, const zf_step_buffers *, zf_error *) {
  reinterpret_cast<Zero3 *>(object)->block_reducer->release_staging();
  return ZF_OK;
}

const zf_param_decl params[] = {
    ZF_ZERO_COMMON_PARAMS,
    zf::param_int("prefetch_bucket_size", "50000000",
                  "elements of the next blocks to gather ahead, at least one block; 0 = none (GPU only: CPU "
                  "collectives block)",
                  zf::at_least(0)),
    zf::param_int("param_persistence_threshold", "100000",
                  "a block with fewer parameter elements stays gathered (resident) between uses", zf::at_least(0)),
    zf::param_int("max_live_parameters", "1000000000",
                  "at most this many elements of resident blocks (the rest is gathered per use)", zf::at_least(0)),
};

// zero2 with the parameters sharded: the resident blocks between uses (gathered from the fp32
// master), and while a block computes its gathered parameters beside its gradients.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return estimate_with(shape, estimate, error, [](const zf_memory_shape &sh, const ShapeSums &s,
                                                  const zf::Config &table, zf_memory_estimate *e) {
    uint64_t resident = 0, released = 0;
    zero3_residency(sh, uint64_t(table.integer("param_persistence_threshold")),
                    uint64_t(table.integer("max_live_parameters")), &resident, &released);
    const uint64_t reduce = reduce_staging(sh, s, uint64_t(table.integer("reduce_bucket_size")));
    set_estimate(e, s.c * resident, s.c * s.shard, 4 * s.shard, s.k * s.shard, reduce, s.c * (s.largest + released),
                 16 * s.numel / s.world,
                 "params c x resident blocks (gathered from the fp32 master; under offload a shard cS of its "
                 "own), grads cS, master 4S, state kS (paper: 16P/N)",
                 "a lower stage.param_persistence_threshold or max_live_parameters keeps fewer blocks resident; "
                 "more ranks divide every shard");
  });
}

// No forward/backward hooks: the host gathers and releases around them, and reduces through
// reduce_block. No gather_parameters: nothing is kept whole; resident blocks are refreshed by
// gather_block.
const zf_stage_api api = {.struct_size = sizeof(zf_stage_api),
                          .create = create,
                          .destroy = destroy,
                          .plan = plan,
                          .reduce_gradients = reduce_gradients,
                          .gather_block = gather_block,
                          .reduce_block = reduce_block,
                          .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "zero3", ZF_KIND_STAGE,
    sizeof params / sizeof params[0], params, "0.2.0",
    "ZeRO-3: zero2 + parameters sharded, each block gathered before use and released after",
    ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_SHARD_OPTIMIZER | ZF_CAP_SHARD_GRADIENTS | ZF_CAP_SHARD_PARAMETERS, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
