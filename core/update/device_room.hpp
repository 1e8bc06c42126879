// device_room.hpp: the memory an "auto" choice of the update (zenflow.topk_ratio, offload.ratio)
// may still fill where the model computes, asked once the first step has shown its peak:
// run.device_memory_limit_gb or the GPU's free memory and what its allocator holds, less that peak
// and a tenth kept free for fragmentation.
#pragma once

#include "plugin/plugin_kinds.hpp"
#include "runtime/runtime.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

struct DeviceRoom {
  bool known = false;  // false: a CPU run without run.device_memory_limit_gb
  uint64_t left = 0;   // bytes
  std::string why;     // "X of Y (source) stay after the first step's peak of Z and a tenth kept free"
  // The share of `numel` elements of `element_bytes` each that fits in `left` (1 when numel is 0).
  double share(uint64_t element_bytes, uint64_t numel) const;
};

DeviceRoom device_room(const Runtime &runtime, zf_tier model_tier);

// The bytes an element of a part updated where the model computes holds: its fp32 master and one
// element of each state tensor of the optimizer there.
uint64_t master_and_state_bytes(const std::vector<StateSpec> &specs);

// The smallest `value` over the ranks: every rank then makes the same choice.
double smallest_over_ranks(Communicator &comm, double value);

}  // namespace zf
