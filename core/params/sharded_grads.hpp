// sharded_grads.hpp: the gradients under a stage that reduces them block by block (reduce_block,
// ZeRO-2 and ZeRO-3). This rank keeps only its reduced shard; each block's gradients live in
// their own storage, attached (zeroed) when the block's backward starts and detached once the
// stage has reduced them into the owners' shards. The shard itself has memory only from the
// step's first reduction to its update (as FSDP2 makes its gradient shards in the backward and
// frees them after the step): it is not held at the peak of the forward and the head's backward.
#pragma once

#include "params/sharded_params.hpp"

#include <deque>
#include <utility>

namespace zf {

class ShardedGradients {
 public:
  // Gives each block its own (detached) gradient storage of dtype on tier, re-points the
  // parameters' .grad there and frees flat.grads, if it was allocated. The shard has shard_dtype
  // (float32 under train.grad_accum_dtype = "float32": the stage widens each block into it).
  ShardedGradients(FlatBuffers &flat, MemoryLedger &ledger, zf_tier tier, torch::Dtype dtype, uint64_t shard_numel,
                   torch::Dtype shard_dtype);
  ShardedGradients(const ShardedGradients &) = delete;
  ShardedGradients &operator=(const ShardedGradients &) = delete;

  // This rank's reduced gradients, ledger "grads.shard"; its storage has memory only while held.
  torch::Tensor shard;
  bool shard_held() const { return shard.storage().nbytes() > 0; }
  void hold_shard();     // attaches zeroed memory; a no-op when held
  void release_shard();  // after the update: nothing reads the gradients until the next backward

  bool held(uint32_t block) const { return blocks_.held(block); }
  void hold(uint32_t block);  // attaches zeroed memory ("grads.block"); a no-op when held
  // Detaches the block's memory once the reduction that reads it is done: `reduced` is an event
  // (record_event) after it on the communication stream, NULL when it is done already (CPU).
  // A GPU run keeps the newest block until the next release, so the compute stream (which reuses
  // the memory) waits for a reduction that had a block's backward to finish in.
  void release(uint32_t block, void *reduced, void *compute_stream);
  void release_all(void *compute_stream);  // what release kept, after the last block
  zf_tensor_view block_view(uint32_t block) const { return blocks_.view(block, "gradients"); }

 private:
  void detach_oldest(void *compute_stream);
  MemoryLedger &ledger_;
  zf_tier tier_;
  uint64_t shard_bytes_ = 0;
  BlockStorage blocks_;
  std::deque<std::pair<uint32_t, void *>> reducing_;  // block, event after its reduction
};

}  // namespace zf
