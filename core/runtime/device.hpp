// device.hpp: the compute device of a run. Everything the core needs from the CUDA runtime goes
// through here, so that only device.cpp and comm/nccl.cpp include CUDA headers. In a CPU build
// the functions exist and say clearly that this build has no CUDA path.
#pragma once

#include "runtime/runtime.hpp"

#include <cstdint>
#include <memory>
#include <string>

namespace zf {

bool cuda_built();        // this build has the CUDA path (-DZF_CUDA=ON)
int cuda_device_count();  // GPUs this process can see (0 without a driver or in a CPU build)

// Makes runtime a CUDA runtime: binds the process to GPU local_rank (one GPU per local rank),
// makes a compute stream torch's current stream, installs the caching allocator for the device
// tier and page-locked memory for the pinned tier, CUDA-event timers, and wraps the communicator
// so that device buffers go through NCCL (world size > 1, or any under mpirun). Throws with the
// reason otherwise.
void use_cuda_device(Runtime &runtime);

// GPU memory as the caching allocator sees it (bytes), for the current device.
struct DeviceMemory {
  uint64_t allocated = 0, allocated_peak = 0;  // held by tensors and ledger blocks
  uint64_t reserved = 0, reserved_peak = 0;    // obtained from the driver by the allocator
  // The largest allocated_peak since the process started: reset_device_memory_peak starts a new
  // step's peak, not this one (an "auto" choice after the first step reads it).
  uint64_t run_allocated_peak = 0;
};
// Deterministic kernels from here on (cuBLAS with a fixed workspace, attention and reductions
// without atomics), so that a GPU run repeats bit for bit. Call before the first GPU matmul.
void use_deterministic_kernels();

DeviceMemory device_memory();
uint64_t device_free_bytes();  // free memory of the current GPU as the driver sees it (0 in a CPU build)
void reset_device_memory_peak();

void synchronize_stream(void *stream);  // waits for one stream, never the whole device; NULL: nothing
// Copies bytes in stream order (device and pinned or plain host memory, any direction).
void device_copy(void *to, const void *from, uint64_t bytes, void *stream);
// dst += src on the device in stream order (fp32 arithmetic, rounded once to the dtype).
void device_accumulate(const zf_tensor_view &dst, const zf_tensor_view &src, void *stream);
// dst = src converted to dst's dtype, on the device in stream order (rounded to nearest even).
void device_convert(const zf_tensor_view &dst, const zf_tensor_view &src, void *stream);

// Ordering between streams, none of it waiting on the host. An event marks what a stream has
// queued so far; wait_event makes another stream wait for it and takes the event back. All are
// no-ops given NULL streams/events (CPU runs), so callers need no branches.
void *record_event(void *stream);
void wait_event(void *stream, void *event);
inline void stream_wait(void *waiter, void *waited) { wait_event(waiter, record_event(waited)); }
// Makes the run's GPU the current device of the calling thread (threads start on device 0).
void use_device_on_this_thread(const Runtime &runtime);
// Blocks the calling thread until the event completed, and takes the event back.
void synchronize_event(void *event);
// Whether the event completed, without waiting (true given NULL); the caller keeps the event.
bool event_completed(void *event);
// A new non-blocking stream on the current device (NULL in a CPU build); never destroyed.
void *create_stream();

// The NCCL communicator (comm/nccl.cpp): device buffers through NCCL on its own stream, ordered
// against the caller's stream with events; host buffers through `host`, which also bootstraps
// it (the unique id goes out by broadcast). A collective that fails or does not finish within
// timeout_s ends every rank with a message.
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, int device,
                                                     double timeout_s);

}  // namespace zf
