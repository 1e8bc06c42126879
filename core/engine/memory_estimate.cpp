#include "engine/memory_estimate.hpp"

#include <algorithm>

namespace zf {

uint64_t shard_elements(uint64_t numel, uint64_t world, uint64_t alignment) {
  uint64_t per_rank = (numel + world - 1) / world;
  if (alignment > 1) per_rank = (per_rank + alignment - 1) / alignment * alignment;
  return std::max<uint64_t>(per_rank, std::max<uint64_t>(alignment, 1));
}

std::vector<StageEstimate> estimate_memory(const EstimateInput &in) {
  uint64_t numel = 0;
  for (uint64_t b : in.blocks) numel += b;
  uint64_t shard = shard_elements(numel, in.world, in.alignment);
  uint64_t padded = shard * in.world;
  const uint64_t c = in.compute_bytes, n = in.world;

  // zero3 residency, as plugins/stages/zero3 decides it.
  uint64_t resident = 0, largest_released = 0;
  for (uint64_t b : in.blocks) {
    if (b < in.persistence_threshold && resident + b <= in.max_live_parameters) resident += b;
    else largest_released = std::max(largest_released, b);
  }

  // A bucket of whole shards (bucket >= N S) stages one shard; a smaller one packs (N + 1) parts
  // of bucket / N elements. The buffer grows to the largest bucket used.
  auto staging = [&](uint64_t bucket) -> uint64_t {
    uint64_t part = std::max<uint64_t>(1, bucket / n);
    if (n == 1) return 0;
    return part >= shard ? c * shard : c * (n + 1) * part;
  };
  uint64_t gather = staging(in.allgather_bucket_size), reduce = staging(in.reduce_bucket_size);

  std::vector<StageEstimate> out(4);
  out[0] = {"zero0", c * numel, 0, c * numel, 4 * numel, in.state_bytes * numel, 0, 16 * numel};
  out[1] = {"zero1", c * padded, 0, c * padded, 4 * shard, in.state_bytes * shard, gather, 4 * numel + 12 * numel / n};
  // The gradient buffer autograd writes stays whole on this CPU path; each rank reduces only its
  // shard of it (the paper's zero2 keeps 2/N bytes of gradients per parameter).
  out[2] = {"zero2", c * padded, 0, c * padded, 4 * shard, in.state_bytes * shard, std::max(gather, reduce),
            2 * numel + 14 * numel / n};
  out[3] = {"zero3", c * (shard + resident), c * largest_released, c * padded, 4 * shard, in.state_bytes * shard,
            reduce, 16 * numel / n};
  return out;
}

}  // namespace zf
