#include "engine/sharded_grads.hpp"

#include "engine/sharded_params.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <cstring>

namespace zf {

ShardedGradients::ShardedGradients(FlatBuffers &flat, MemoryLedger &ledger, uint64_t shard_numel)
    : layout_(flat.layout()), ledger_(ledger), dtype_(flat.grads.scalar_type()) {
  shard = ledger_tensor(ledger, ZF_TIER_HOST, shard_numel, dtype_, "grads.shard");
  for (uint32_t b = 0; b < layout_.block_count; ++b) {
    torch::Tensor storage =
        ledger_tensor(ledger, ZF_TIER_HOST, std::max<uint64_t>(layout_.blocks[b].numel, 1), dtype_, "grads.block");
    flat.bind_block_grads(b, storage);
    storage_.push_back(storage);
    release(b);
  }
  flat.grads = torch::Tensor();  // the last reference: the whole buffer goes back to the ledger
}

bool ShardedGradients::held(uint32_t block) const { return storage_[block].storage().nbytes() > 0; }

void ShardedGradients::hold(uint32_t block) {
  if (held(block)) return;
  uint64_t bytes = std::max<uint64_t>(layout_.blocks[block].numel, 1) * c10::elementSize(dtype_);
  attach_memory(storage_[block], ledger_, bytes, "grads.block");
  std::memset(storage_[block].data_ptr(), 0, bytes);
}

void ShardedGradients::release(uint32_t block) {
  if (held(block)) detach_memory(storage_[block]);
}

zf_tensor_view ShardedGradients::block_view(uint32_t block) const {
  ZF_REQUIRE(held(block), "internal: block %u's gradients are released", block);
  zf_tensor_view view = view_of(storage_[block]);
  view.numel = layout_.blocks[block].numel;
  return view;
}

}  // namespace zf
