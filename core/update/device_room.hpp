// device_room.hpp: the memory an "auto" choice of the update (zenflow.topk_ratio, offload.ratio)
// may still fill where the model computes, asked once the first step has shown its peak:
// run.device_memory_limit_gb or the GPU's free memory and what its allocator holds, less that peak
// and a tenth kept free for fragmentation.
#pragma once

#include "runtime/runtime.hpp"

#include <cstdint>
#include <string>

namespace zf {

struct DeviceRoom {
  bool known = false;  // false: a CPU run without run.device_memory_limit_gb
  uint64_t left = 0;   // bytes
  std::string why;     // "X of Y (source) stay after the first step's peak of Z and a tenth kept free"
};

DeviceRoom device_room(const Runtime &runtime, zf_tier model_tier);

}  // namespace zf
