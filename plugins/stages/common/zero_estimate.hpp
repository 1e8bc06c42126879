// zero_estimate.hpp: the memory rules of the ZeRO stages (ABI 1.7's estimate_memory), with the
// arithmetic the stages use to size their buffers: shards padded to equal length, staging as
// Collectives and BlockReducer allocate it, ZeRO-3 residency as zero3's plan decides it. Bytes
// are per rank; the ledger tags are in plugins/stages/README.md.
#pragma once

#include "zero_shard.hpp"

namespace zf::zero {

// What every ZeRO stage's rule starts from.
struct ShapeSums {
  uint64_t numel = 0, largest = 0, world = 1, shard = 0, c = 4, k = 8;
  explicit ShapeSums(const zf_memory_shape &shape)
      : numel(zf::shape_numel(shape)), largest(zf::shape_largest_block(shape)),
        world(shape.world_size ? shape.world_size : 1),
        shard(shard_numel(numel, world, shape.alignment)), c(shape.compute_bytes), k(shape.state_bytes) {}
  uint64_t padded() const { return shard * world; }
};

// zero2/zero3 reduce_block: one piece of a block's range that one rank owns, at most a bucket,
// staged only on micro-steps after the first (the first reduces straight into the shard).
inline uint64_t reduce_staging(const zf_memory_shape &shape, const ShapeSums &s, uint64_t reduce_bucket) {
  if (s.world == 1 || shape.grad_accum <= 1) return 0;
  uint64_t piece = 0, offset = 0;
  for (uint32_t i = 0; i < shape.block_count; ++i) {
    const uint64_t b = shape.blocks[i];
    for (uint64_t owner = offset / s.shard; owner < s.world && owner * s.shard < offset + b; ++owner)
      piece = std::max(piece, std::min(offset + b, (owner + 1) * s.shard) - std::max(offset, owner * s.shard));
    offset += b;
  }
  return s.c * std::min(piece, std::max<uint64_t>(1, reduce_bucket));
}

// zero3: the elements of the blocks that stay resident (below the threshold, while they fit in
// max_live) and the largest block that does not.
inline void zero3_residency(const zf_memory_shape &shape, uint64_t threshold, uint64_t max_live, uint64_t *resident,
                            uint64_t *largest_released) {
  *resident = *largest_released = 0;
  for (uint32_t i = 0; i < shape.block_count; ++i) {
    const uint64_t b = shape.blocks[i];
    if (b < threshold && *resident + b <= max_live) *resident += b;
    else *largest_released = std::max(*largest_released, b);
  }
}

// Fills the categories, their total on the compute tier, the formula (note) and the advice.
inline void set_estimate(zf_memory_estimate *e, uint64_t params, uint64_t grads, uint64_t master, uint64_t state,
                         uint64_t staging, uint64_t transient, uint64_t reference, const char *formula,
                         const char *advice) {
  e->params = params;
  e->grads = grads;
  e->master = master;
  e->state = state;
  e->staging = staging;
  e->transient = transient;
  e->reference = reference;
  e->tier_bytes[ZF_TIER_DEVICE] = params + grads + master + state + staging + transient;
  zf::set_text(e->note, formula);
  zf::set_text(e->advice, advice);
}

// The estimate_memory entry of a stage whose rule is `rule(shape, sums, table, estimate)`.
template <class Rule>
zf_status estimate_with(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error, Rule rule) {
  return zf::guard(error, [&] {
    if (!shape->blocks || !shape->block_count || !shape->compute_bytes)
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT, "the shape has no blocks or no compute dtype");
    rule(*shape, ShapeSums(*shape), zf::Config(shape), estimate);
  });
}

}  // namespace zf::zero
