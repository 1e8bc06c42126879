#include "memory/memory_plan.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <fstream>
#include <limits>
#include <map>

namespace zf {

namespace {

// A number from a one-line file ("max" = no limit); 0 when absent.
uint64_t read_number(const char *path) {
  std::ifstream in(path);
  std::string text;
  if (!(in >> text) || text == "max") return 0;
  try {
    return std::stoull(text);
  } catch (...) {
    return 0;
  }
}

uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace

HostMemoryLimit host_memory_limit(double limit_gb) {
  if (limit_gb > 0) return {uint64_t(limit_gb * double(1ull << 30)), "run.host_memory_limit_gb"};
  // cgroup v2, then v1 (whose "no limit" is a huge number).
  uint64_t limit = read_number("/sys/fs/cgroup/memory.max"), used = read_number("/sys/fs/cgroup/memory.current");
  if (limit == 0) {
    limit = read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    used = read_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    if (limit >= (1ull << 60)) limit = 0;
  }
  if (limit > 0) return {limit > used ? limit - used : 0, "cgroup limit less its usage"};
  return {mem_available(), "available memory"};
}

uint64_t MemoryPlan::bytes(zf_tier tier) const {
  uint64_t total = 0;
  for (const PlannedBuffer &b : buffers)
    if (b.tier == tier) total += b.bytes;
  return total;
}

std::string MemoryPlan::describe(zf_tier tier) const {
  std::map<std::string, uint64_t> by_tag;
  for (const PlannedBuffer &b : buffers)
    if (b.tier == tier) by_tag[b.tag] += b.bytes;
  std::string detail;
  for (const auto &[tag, bytes] : by_tag) detail += (detail.empty() ? "" : ", ") + tag + " " + format_bytes(bytes);
  return format_bytes(bytes(tier)) + " (" + detail + ")";
}

void check_memory_plan(const MemoryPlan &plan, const HostMemoryLimit &host, int local_size, uint64_t device_free,
                       const std::function<std::string()> &advice) {
  uint64_t per_host = plan.host_bytes() * uint64_t(std::max(1, local_size));
  if (host.bytes > 0 && per_host > host.bytes)
    throw Error(format("the memory plan does not fit: this rank needs %s of host memory (pinned %s, pageable %s)%s, "
                       "and this host allows %s (%s). %s",
                       format_bytes(plan.host_bytes()).c_str(), format_bytes(plan.bytes(ZF_TIER_PINNED_HOST)).c_str(),
                       format_bytes(plan.bytes(ZF_TIER_HOST)).c_str(),
                       local_size > 1 ? format(", %s for the %d ranks of this host", format_bytes(per_host).c_str(),
                                               local_size).c_str()
                                      : "",
                       format_bytes(host.bytes).c_str(), host.source.c_str(), advice().c_str()));
  if (device_free > 0 && plan.bytes(ZF_TIER_DEVICE) > device_free)
    throw Error(format("the memory plan does not fit: this rank needs %s of GPU memory, and the GPU has %s free. %s",
                       plan.describe(ZF_TIER_DEVICE).c_str(), format_bytes(device_free).c_str(),
                       advice().c_str()));
}

}  // namespace zf
