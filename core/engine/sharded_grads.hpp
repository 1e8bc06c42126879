// sharded_grads.hpp: the gradients under a stage that reduces them block by block (reduce_block,
// ZeRO-2 and ZeRO-3). This rank keeps only its reduced shard; each block's gradients live in
// their own storage, attached (zeroed) when the block's backward starts and detached once the
// stage has reduced them into the owners' shards.
#pragma once

#include "engine/sharded_params.hpp"



namespace zf {

class ShardedGradients {
 public:
  // Gives each block its own (detached) gradient storage, re-points the parameters' .grad and
  // frees flat.grads.
  ShardedGradients(FlatBuffers &flat, MemoryLedger &ledger, uint64_t shard_numel);
  ShardedGradients(const ShardedGradients &) = delete;
  ShardedGradients &operator=(const ShardedGradients &) = delete;

  torch::Tensor shard;  // this rank's reduced gradients, ledger "grads.shard"

  bool held(uint32_t block) const { return blocks_.held(block); }
  void hold(uint32_t block);     // attaches zeroed memory ("grads.block"); a no-op when held
  void release(uint32_t block);  // detaches it
  zf_tensor_view block_view(uint32_t block) const { return blocks_.view(block, "gradients"); }

 private:
  BlockStorage blocks_;
};

}  // namespace zf
