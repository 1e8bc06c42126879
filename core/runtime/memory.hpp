// memory.hpp: the memory ledger. Every large allocation of the core and of plugins goes through
// it, by tier (device, pinned host, host, NVMe) and tag ("master", "adam.m", ...), so a run can
// print what it holds, report peaks per tier and refuse a plan that cannot fit.
#pragma once

#include <zf/zf_plugin.h>

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace zf {

const char *tier_name(zf_tier tier);  // "device", "pinned", "host", "nvme"

class MemoryLedger {
 public:
  static constexpr uint64_t kAlignment = 4096;

  // Where a tier's memory comes from when not from the host heap: the CUDA layer
  // (runtime/device.hpp) installs the caching allocator for the device tier and page-locked
  // memory for the pinned tier. Without one, the device tier is refused and pinned is plain host.
  struct TierAllocator {
    void *(*allocate)(uint64_t bytes) = nullptr;  // nullptr when out of memory
    void (*release)(void *pointer) = nullptr;
  };
  void set_allocator(zf_tier tier, TierAllocator allocator);
  bool has_allocator(zf_tier tier) const;

  // Allocates on a tier (4096-aligned on the host; not zero-filled: the caller touches it first).
  void *allocate(zf_tier tier, uint64_t bytes, const std::string &tag);
  void release(void *pointer);
  void account(zf_tier tier, const std::string &tag, int64_t delta_bytes);

  uint64_t current(zf_tier tier) const;
  uint64_t peak(zf_tier tier) const;
  std::map<std::string, uint64_t> current_by_tag(zf_tier tier) const;  // tag -> bytes
  std::map<std::string, uint64_t> peak_by_tag(zf_tier tier) const;     // tag -> the most it held at once

 private:
  struct Block {
    zf_tier tier;
    uint64_t bytes;
    std::string tag;
    void (*release)(void *);  // nullptr: std::free
  };
  void add(zf_tier tier, const std::string &tag, int64_t delta);
  mutable std::mutex mutex_;
  std::array<TierAllocator, ZF_TIER_COUNT> allocators_{};
  std::unordered_map<void *, Block> blocks_;
  std::array<uint64_t, ZF_TIER_COUNT> current_{};
  std::array<uint64_t, ZF_TIER_COUNT> peak_{};
  std::array<std::map<std::string, uint64_t>, ZF_TIER_COUNT> by_tag_;
  std::array<std::map<std::string, uint64_t>, ZF_TIER_COUNT> peak_by_tag_;
};

std::string format_bytes(uint64_t bytes);  // "12.3 MiB"

}  // namespace zf
