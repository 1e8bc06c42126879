#include "runtime/memory.hpp"

#include "runtime/error.hpp"

#include <algorithm>
#include <cstdlib>

namespace zf {

const char *tier_name(zf_tier tier) {
  switch (tier) {
    case ZF_TIER_DEVICE: return "device";
    case ZF_TIER_PINNED_HOST: return "pinned";
    case ZF_TIER_HOST: return "host";
    case ZF_TIER_NVME: return "nvme";
    default: return "unknown";
  }
}

void MemoryLedger::set_allocator(zf_tier tier, TierAllocator allocator) {
  ZF_REQUIRE(tier >= 0 && tier < ZF_TIER_COUNT, "memory ledger: unknown tier %d", int(tier));
  std::lock_guard<std::mutex> lock(mutex_);
  allocators_[tier] = allocator;
}

bool MemoryLedger::has_allocator(zf_tier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return tier >= 0 && tier < ZF_TIER_COUNT && allocators_[tier].allocate != nullptr;
}

void *MemoryLedger::allocate(zf_tier tier, uint64_t bytes, const std::string &tag) {
  ZF_REQUIRE(tier >= 0 && tier < ZF_TIER_COUNT, "memory ledger: unknown tier %d", int(tier));
  TierAllocator custom;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    custom = allocators_[tier];
  }
  ZF_REQUIRE(custom.allocate || tier == ZF_TIER_HOST || tier == ZF_TIER_PINNED_HOST,
             "memory ledger: tier '%s' is not available in this run (device memory needs run.device = \"cuda\" "
             "in a CUDA build)", tier_name(tier));
  uint64_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void *pointer = custom.allocate ? custom.allocate(rounded ? rounded : kAlignment)
                                  : std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
  ZF_REQUIRE(pointer != nullptr, "out of memory allocating %s for '%s' (%s held on tier %s)",
             format_bytes(bytes).c_str(), tag.c_str(), format_bytes(current(tier)).c_str(),
             tier_name(tier));
  std::lock_guard<std::mutex> lock(mutex_);
  blocks_[pointer] = Block{tier, bytes, tag, custom.release};
  add(tier, tag, int64_t(bytes));
  return pointer;
}

void MemoryLedger::release(void *pointer) {
  if (!pointer) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = blocks_.find(pointer);
  if (it == blocks_.end()) return;  // not ours: never free what we did not allocate
  auto release = it->second.release;
  add(it->second.tier, it->second.tag, -int64_t(it->second.bytes));
  blocks_.erase(it);
  if (release) release(pointer);
  else std::free(pointer);
}

void MemoryLedger::account(zf_tier tier, const std::string &tag, int64_t delta_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  add(tier, tag, delta_bytes);
}

void MemoryLedger::add(zf_tier tier, const std::string &tag, int64_t delta) {
  if (tier < 0 || tier >= ZF_TIER_COUNT) return;
  auto apply = [delta](uint64_t &value) {
    value = (delta < 0 && uint64_t(-delta) > value) ? 0 : uint64_t(int64_t(value) + delta);
  };
  apply(current_[tier]);
  if (current_[tier] > peak_[tier]) peak_[tier] = current_[tier];
  uint64_t &bytes = by_tag_[tier][tag];
  apply(bytes);
  uint64_t &peak = peak_by_tag_[tier][tag];
  peak = std::max(peak, bytes);
  if (bytes == 0) by_tag_[tier].erase(tag);
}

uint64_t MemoryLedger::current(zf_tier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return current_[tier];
}

uint64_t MemoryLedger::peak(zf_tier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_[tier];
}

std::map<std::string, uint64_t> MemoryLedger::current_by_tag(zf_tier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return by_tag_[tier];
}

std::map<std::string, uint64_t> MemoryLedger::peak_by_tag(zf_tier tier) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_by_tag_[tier];
}

std::string format_bytes(uint64_t bytes) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return unit == 0 ? format("%llu B", (unsigned long long)bytes) : format("%.1f %s", value, units[unit]);
}

}  // namespace zf
