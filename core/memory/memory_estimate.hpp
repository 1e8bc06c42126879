// memory_estimate.hpp: per-rank memory of a run predicted before it runs, for each ZeRO stage and
// world size, with the same arithmetic the engine and the stage plugins use to size their
// buffers (shards padded to equal length). `zfcore estimate` prints it; the ledger of a real run
// shows the same bytes under the tags named here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct EstimateInput {
  std::vector<uint64_t> blocks;    // parameter elements per block, in order (layout numel = sum)
  uint64_t world = 1;
  uint64_t compute_bytes = 4;      // working parameters and gradients: fp32 4, bf16 2
  uint64_t state_bytes = 8;        // optimizer state per parameter (Adam 8: m and v in fp32)
  uint64_t alignment = 64;         // elements; shards are rounded up to it
  uint64_t persistence_threshold = 100000;  // zero3: blocks below it stay resident
  uint64_t max_live_parameters = 1000000000;
  uint64_t reduce_bucket_size = 500000000;     // zero1-3 knobs: they size the staging buffers
  uint64_t allgather_bucket_size = 500000000;
  uint64_t grad_accum = 1;         // micro-steps: zero2/3 stage a reduction only to add a later one
};

struct StageEstimate {
  std::string stage;
  uint64_t params = 0;     // "params" (zero0-2) or "params.resident" (zero3, which gathers from the
                           // fp32 master; under offload it keeps a "params.shard" too)
  uint64_t grads = 0;      // "grads" (zero0-1) or "grads.shard" (zero2-3, from the backward to the update)
  uint64_t master = 0;     // "master" (fp32)
  uint64_t state = 0;      // the optimizer's tags (exp_avg + exp_avg_sq for Adam)
  uint64_t staging = 0;    // "<stage>.staging" + "<stage>.reduce_staging": collective buffers
  uint64_t transient = 0;  // held only while one block computes: its gradients ("grads.block",
                           // zero2-3) and, zero3, its gathered parameters ("params.gathered")
  uint64_t paper = 0;      // ZeRO paper, mixed-precision Adam: (2 + 2 + 12) bytes/param, divided as the stage does
  uint64_t total() const { return params + grads + master + state + staging + transient; }
};

// Elements per rank of a sharded stage: ceil(numel / world) rounded up to alignment.
uint64_t shard_elements(uint64_t numel, uint64_t world, uint64_t alignment);

// zero0, zero1, zero2, zero3, in that order.
std::vector<StageEstimate> estimate_memory(const EstimateInput &input);

}  // namespace zf
