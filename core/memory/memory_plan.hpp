// memory_plan.hpp: what a rank will hold per tier, known before it allocates anything large, beside
// what the machine lets it use. Printed at start; a plan that cannot fit is refused with a message
// that names what would fit, instead of dying to the kernel's OOM killer mid-run.
#pragma once

#include <zf/zf_plugin.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace zf {

// Host memory this host lets the run use (all its ranks together) and where the figure came from.
struct HostMemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "cgroup limit", "available memory", "run.host_memory_limit_gb"
};
// limit_gb > 0: that; else the cgroup's limit less what the cgroup uses, when it has one (some
// machines start with a small MemTotal that grows, so the limit is the figure to trust), else
// MemAvailable.
HostMemoryLimit host_memory_limit(double limit_gb);

// Bytes of one buffer per tier and tag, known before anything is allocated.
struct PlannedBuffer {
  zf_tier tier;
  std::string tag;
  uint64_t bytes;
};

struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;  // this rank's
  uint64_t bytes(zf_tier tier) const;
  uint64_t host_bytes() const { return bytes(ZF_TIER_HOST) + bytes(ZF_TIER_PINNED_HOST); }
  std::string describe(zf_tier tier) const;  // "9.2 GiB (master 6.1 GiB, ...)"
};

// Throws with the reason and what would fit when the host tiers of all local ranks exceed the
// limit, or the device tier exceeds device_free (0 = unknown). `advice` lists the ways out (asked
// only then: the run's plugins answer it, memory/memory_estimate.hpp).
void check_memory_plan(const MemoryPlan &plan, const HostMemoryLimit &host, int local_size, uint64_t device_free,
                       const std::function<std::string()> &advice);

}  // namespace zf
