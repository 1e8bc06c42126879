#include "params/sharded_grads.hpp"

#include "runtime/device.hpp"

namespace zf {

ShardedGradients::ShardedGradients(FlatBuffers &flat, MemoryLedger &ledger, zf_tier tier, torch::Dtype dtype,
                                   uint64_t shard_numel, torch::Dtype shard_dtype)
    : ledger_(ledger), tier_(tier), blocks_(flat.layout(), ledger, tier, dtype) {
  shard = ledger_tensor(ledger, tier, shard_numel, shard_dtype, "grads.shard", /*zero=*/false);
  detach_memory(shard);  // hold_shard attaches (zeroed) memory at the step's first reduction
  shard_bytes_ = shard_numel * shard.element_size();
  for (uint32_t b = 0; b < flat.layout().block_count; ++b) {
    flat.bind_block_grads(b, blocks_.add("grads.block", /*zero=*/false));
    blocks_.detach(b);
  }
  flat.grads = torch::Tensor();  // the last reference: a whole buffer goes back to the ledger
}

void ShardedGradients::hold(uint32_t block) {
  if (held(block)) return;
  blocks_.attach(block, "grads.block");
  torch::NoGradGuard no_grad;
  blocks_[block].zero_();
}

void ShardedGradients::hold_shard() {
  if (shard_held()) return;
  attach_memory(shard, ledger_, tier_, shard_bytes_, "grads.shard");
  torch::NoGradGuard no_grad;
  shard.zero_();
}

void ShardedGradients::release_shard() { detach_memory(shard); }

void ShardedGradients::release(uint32_t block, void *reduced, void *compute_stream) {
  if (!held(block)) return;
  reducing_.emplace_back(block, reduced);
  while (reducing_.size() > 1 || (reducing_.size() == 1 && !reduced)) detach_oldest(compute_stream);
}

void ShardedGradients::release_all(void *compute_stream) {
  while (!reducing_.empty()) detach_oldest(compute_stream);
}

void ShardedGradients::detach_oldest(void *compute_stream) {
  auto [block, reduced] = reducing_.front();
  reducing_.pop_front();
  wait_event(compute_stream, reduced);
  blocks_.detach(block);
}

}  // namespace zf
