// sharded_params.hpp: the working parameters where they are not kept whole on the compute device:
// under a stage that shards them (ZeRO-3) this rank keeps only its shard of the flat buffer, and
// under parameter offload (cpu_full) its shard or all of them in host memory (the store). Every
// block has its own storage on the compute device, which is held (allocated, then filled by the
// stage's gather_block or a copy from the store) only while the block computes, unless the block
// is resident. Releasing keeps the tensors (autograd saved them for backward)
// but gives their memory back to the ledger; holding again re-attaches fresh memory to the same
// storage, so the saved tensors see the re-gathered values.
#pragma once

#include "params/flat_buffers.hpp"

#include <vector>

namespace zf {

// Attaches `bytes` of fresh ledger memory (tier, tag) to tensor's storage, or detaches it: the
// tensor, its views and whatever autograd saved of them keep the storage object throughout.
// Device memory comes from (and goes back to) the compute stream's pool.
void attach_memory(const torch::Tensor &tensor, MemoryLedger &ledger, zf_tier tier, uint64_t bytes, const char *tag);
void detach_memory(const torch::Tensor &tensor);

// One storage per block of the layout (at least one element each) on a tier (host, or device on
// a GPU run), whose memory comes and goes: a block is held while memory is attached. Shared by
// the sharded parameters and gradients.
class BlockStorage {
 public:
  BlockStorage(const zf_layout &layout, MemoryLedger &ledger, zf_tier tier, torch::Dtype dtype)
      : layout_(layout), ledger_(ledger), tier_(tier), dtype_(dtype) {}
  // Allocates the next block's storage (ledger tag), attached (zeroed unless zero is false).
  torch::Tensor add(const char *tag, bool zero = true);
  bool held(uint32_t block) const { return storage_[block].storage().nbytes() > 0; }
  // Attaches fresh memory (tag) to a released block.
  void attach(uint32_t block, const char *tag);
  void detach(uint32_t block) { detach_memory(storage_[block]); }
  // The block's storage as an ABI view; what names the contents in the error for a released block.
  zf_tensor_view view(uint32_t block, const char *what) const;
  const torch::Tensor &operator[](uint32_t block) const { return storage_[block]; }
  uint32_t count() const { return uint32_t(storage_.size()); }

 private:
  uint64_t bytes(uint32_t block) const;

  const zf_layout &layout_;
  MemoryLedger &ledger_;
  zf_tier tier_;
  torch::Dtype dtype_;
  std::vector<torch::Tensor> storage_;
};

class ShardedParameters {
 public:
  // `store` holds layout elements [store_begin, store_begin + store.numel()) of the parameters:
  // this rank's shard (filled shard by shard, or the fp32 master of that range), or flat.params
  // itself when the store is the whole buffer. Each block gets its own storage of dtype on tier
  // (resident ones stay held, Residency gathers them; the others start released), the model's
  // parameters are re-pointed there, and flat.params goes.
  ShardedParameters(FlatBuffers &flat, MemoryLedger &ledger, zf_tier tier, torch::Dtype dtype, uint64_t store_begin,
                    torch::Tensor store, std::vector<uint8_t> resident);
  ShardedParameters(const ShardedParameters &) = delete;
  ShardedParameters &operator=(const ShardedParameters &) = delete;

  // Layout elements [store_begin, store_end) of the parameters, ledger "params.shard" (or "params"
  // when it is the whole buffer, "master" when it is the master); the stage's gather_block reads it
  // as this rank's shard.
  torch::Tensor store;
  const uint64_t store_begin;

  bool resident(uint32_t block) const { return resident_[block] != 0; }
  bool held(uint32_t block) const;
  // Attaches memory ("params.gathered") to a released block; a no-op for a held one.
  void hold(uint32_t block);
  // Gives a non-resident block's memory back; a no-op for resident ones.
  void release(uint32_t block);
  // The block's storage as an ABI view (the block must be held).
  zf_tensor_view block_view(uint32_t block) const;
  uint32_t block_count() const { return blocks_.count(); }

 private:
  std::vector<uint8_t> resident_;
  BlockStorage blocks_;
};

}  // namespace zf
