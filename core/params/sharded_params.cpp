#include "params/sharded_params.hpp"

#include "runtime/error.hpp"

#include <c10/core/Allocator.h>

#include <algorithm>
#include <cstring>

namespace zf {

ShardedParameters::ShardedParameters(FlatBuffers &flat, MemoryLedger &ledger, zf_tier tier, torch::Dtype dtype,
                                     uint64_t store_begin, torch::Tensor store, std::vector<uint8_t> resident)
    : store(std::move(store)), store_begin(store_begin), resident_(std::move(resident)),
      blocks_(flat.layout(), ledger, tier, dtype) {
  const zf_layout &layout = flat.layout();
  ZF_REQUIRE(resident_.size() == layout.block_count, "internal: one residency flag per block");
  for (uint32_t b = 0; b < layout.block_count; ++b) {
    flat.bind_block(b, blocks_.add(resident_[b] ? "params.resident" : "params.gathered", /*zero=*/false));
    release(b);
  }
  flat.params = torch::Tensor();  // unless it is the store, the full buffer goes back to the ledger
}

void attach_memory(const torch::Tensor &tensor, MemoryLedger &ledger, zf_tier tier, uint64_t bytes, const char *tag) {
  c10::StorageImpl *storage = tensor.storage().unsafeGetStorageImpl();
  void *memory = ledger.allocate(tier, bytes, tag);
  MemoryLedger *owner = &ledger;
  storage->set_data_ptr_noswap(c10::InefficientStdFunctionContext::makeDataPtr(
      memory, [owner](void *p) { owner->release(p); }, storage->device()));
  storage->set_nbytes(bytes);
}

void detach_memory(const torch::Tensor &tensor) {
  c10::StorageImpl *storage = tensor.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, storage->device()));  // frees the memory
  storage->set_nbytes(0);
}

torch::Tensor BlockStorage::add(const char *tag, bool zero) {
  uint32_t block = count();
  storage_.push_back(ledger_tensor(ledger_, tier_, bytes(block) / c10::elementSize(dtype_), dtype_, tag, zero));
  return storage_.back();
}

uint64_t BlockStorage::bytes(uint32_t block) const {
  return std::max<uint64_t>(layout_.blocks[block].numel, 1) * c10::elementSize(dtype_);
}

void BlockStorage::attach(uint32_t block, const char *tag) {
  attach_memory(storage_[block], ledger_, tier_, bytes(block), tag);
}

zf_tensor_view BlockStorage::view(uint32_t block, const char *what) const {
  ZF_REQUIRE(held(block), "internal: block %u's %s are released", block, what);
  zf_tensor_view view = view_of(storage_[block]);
  view.numel = layout_.blocks[block].numel;
  return view;
}

bool ShardedParameters::held(uint32_t block) const { return blocks_.held(block); }

void ShardedParameters::hold(uint32_t block) {
  if (!held(block)) blocks_.attach(block, "params.gathered");
}

void ShardedParameters::release(uint32_t block) {
  if (!resident_[block] && held(block)) blocks_.detach(block);
}

zf_tensor_view ShardedParameters::block_view(uint32_t block) const { return blocks_.view(block, "parameters"); }

}  // namespace zf
