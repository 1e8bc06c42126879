#include "update/device_room.hpp"

#include "runtime/device.hpp"
#include "runtime/error.hpp"

#include <algorithm>

namespace zf {

DeviceRoom device_room(const Runtime &runtime, zf_tier model_tier) {
  const bool on_gpu = runtime.device == ZF_DEVICE_CUDA;
  uint64_t capacity = runtime.device_memory_limit, used = runtime.memory.peak(model_tier);
  std::string source = "run.device_memory_limit_gb";
  if (on_gpu) {
    const DeviceMemory gpu = device_memory();
    if (capacity == 0) {
      capacity = device_free_bytes() + gpu.reserved;
      source = "the GPU's free memory and what the allocator holds";
    }
    // The first step's forward and backward included: the step reports reset the allocator's
    // peak, the run's is kept.
    used = gpu.run_allocated_peak;
  }
  DeviceRoom room;
  if (capacity == 0) return room;
  const uint64_t margin = capacity / 10;
  room.known = true;
  room.left = capacity > used + margin ? capacity - used - margin : 0;
  room.why = format("%s of %s (%s) stay after %s of %s and a tenth kept free", format_bytes(room.left).c_str(),
                    format_bytes(capacity).c_str(), source.c_str(),
                    on_gpu ? "the first step's peak" : "the buffers' peak", format_bytes(used).c_str());
  return room;
}

double DeviceRoom::share(uint64_t element_bytes, uint64_t numel) const {
  return numel == 0 ? 1.0 : std::min(1.0, double(left / element_bytes) / double(numel));
}

uint64_t master_and_state_bytes(const std::vector<StateSpec> &specs) {
  uint64_t bytes = 4;
  for (const StateSpec &spec : specs) bytes += c10::elementSize(spec.dtype);
  return bytes;
}

double smallest_over_ranks(Communicator &comm, double value) {
  double values[1] = {value};
  comm.all_reduce(zf_tensor_view{values, 1, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MIN, nullptr);
  return values[0];
}

}  // namespace zf
