#include "engine/sharded_grads.hpp"

#include <cstring>

namespace zf {

ShardedGradients::ShardedGradients(FlatBuffers &flat, MemoryLedger &ledger, uint64_t shard_numel)
    : blocks_(flat.layout(), ledger, flat.grads.scalar_type()) {
  shard = ledger_tensor(ledger, ZF_TIER_HOST, shard_numel, flat.grads.scalar_type(), "grads.shard");
  for (uint32_t b = 0; b < flat.layout().block_count; ++b) {
    flat.bind_block_grads(b, blocks_.add("grads.block"));
    release(b);
  }
  flat.grads = torch::Tensor();  // the last reference: the whole buffer goes back to the ledger
}

void ShardedGradients::hold(uint32_t block) {
  if (held(block)) return;
  blocks_.attach(block, "grads.block");
  std::memset(blocks_[block].data_ptr(), 0, blocks_[block].storage().nbytes());
}

void ShardedGradients::release(uint32_t block) {
  if (held(block)) blocks_.detach(block);
}

}  // namespace zf
