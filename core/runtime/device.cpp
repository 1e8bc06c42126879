// The CUDA device layer (runtime/device.hpp). CPU builds compile the fallbacks at the end.
#include "runtime/device.hpp"

#include "runtime/tensors.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/parallel.hpp"

#include <cstdlib>

#if ZF_WITH_CUDA
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#define ZF_CUDA_CHECK(call)                                                                          \
  do {                                                                                               \
    cudaError_t zf_cuda_status = (call);                                                             \
    if (zf_cuda_status != cudaSuccess)                                                               \
      throw ::zf::Error(::zf::format("CUDA error at %s:%d: %s (%s)", __FILE__, __LINE__, #call,      \
                                     cudaGetErrorString(zf_cuda_status)));                           \
  } while (0)

namespace zf {
namespace {

namespace allocator = c10::cuda::CUDACachingAllocator;

void *device_allocate(uint64_t bytes) {
  try {
    return allocator::raw_alloc(size_t(bytes));
  } catch (const c10::Error &) {
    return nullptr;  // the ledger reports the out-of-memory with the tag and tier
  }
}
void device_release(void *pointer) { allocator::raw_delete(pointer); }

// Page-locked memory: mapped (huge pages advised), its pages touched on all of the rank's cores (the kernel zeroes
// each page in the faulting thread: cudaHostAlloc does all of that on one), then registered with
// CUDA. Tens of GiB of pinned optimizer state thus take a fraction of the time to set up.
std::mutex g_pinned_mutex;
std::map<void *, size_t> g_pinned;  // mapping -> bytes

void *pinned_allocate(uint64_t bytes) {
  bytes = std::max<uint64_t>(bytes, 1);
  void *pointer = mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (pointer == MAP_FAILED) return nullptr;
  // In 2 MiB pages where the kernel has them (transparent huge pages): 512 times fewer faults to
  // take and pages to pin. At Qwen2.5-32B on 4 H100, 4 KiB pages set up 91.5 GiB a rank at about
  // 1 GiB/s, most of the 91 s before the first step.
  madvise(pointer, size_t(bytes), MADV_HUGEPAGE);
  constexpr size_t kPiece = size_t(64) << 20;
  const long page = sysconf(_SC_PAGESIZE);
  parallel_chunks(int64_t((bytes + kPiece - 1) / kPiece), [&](int64_t piece) {
    char *p = static_cast<char *>(pointer) + size_t(piece) * kPiece;
    char *end = static_cast<char *>(pointer) + std::min<size_t>(size_t(bytes), size_t(piece + 1) * kPiece);
    for (; p < end; p += page) *reinterpret_cast<volatile char *>(p) = 0;
  });
  if (cudaHostRegister(pointer, size_t(bytes), cudaHostRegisterDefault) != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    munmap(pointer, size_t(bytes));
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  g_pinned[pointer] = size_t(bytes);
  return pointer;
}
void pinned_release(void *pointer) {
  size_t bytes = 0;
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned.find(pointer);
    if (it == g_pinned.end()) return;
    bytes = it->second;
    g_pinned.erase(it);
  }
  cudaHostUnregister(pointer);
  munmap(pointer, bytes);
}

// CUDA events from a pool: timers record two per interval and every step would create them anew.
class CudaEventClock final : public EventClock {
 public:
  ~CudaEventClock() override {
    for (cudaEvent_t event : pool_) cudaEventDestroy(event);
  }
  void *record(void *stream) override {
    cudaEvent_t event = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!pool_.empty()) {
        event = pool_.back();
        pool_.pop_back();
      }
    }
    if (!event) ZF_CUDA_CHECK(cudaEventCreate(&event));
    ZF_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream)));
    return event;
  }
  double elapsed_ms(void *from, void *to) override {
    ZF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(to)));
    float ms = 0;
    ZF_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
    return double(ms);
  }
  void recycle(void *event) override {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.push_back(static_cast<cudaEvent_t>(event));
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> pool_;
};

// Events that order streams (no timing): taken by record_event, given back by wait_event.
class OrderingEvents {
 public:
  cudaEvent_t take() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!pool_.empty()) {
        cudaEvent_t event = pool_.back();
        pool_.pop_back();
        return event;
      }
    }
    cudaEvent_t event = nullptr;
    // Blocking sync: a thread waiting on one (synchronize_event) sleeps instead of spinning on a
    // core that the optimizer's workers or the training thread need.
    ZF_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming | cudaEventBlockingSync));
    return event;
  }
  void give_back(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mutex_);
    pool_.push_back(event);
  }

 private:
  std::mutex mutex_;
  std::vector<cudaEvent_t> pool_;
};

OrderingEvents &ordering_events() {
  static OrderingEvents *events = new OrderingEvents;  // lives until exit: hooks may run late
  return *events;
}

}  // namespace

bool cuda_built() { return true; }

int cuda_device_count() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

void use_cuda_device(Runtime &runtime) {
  int count = cuda_device_count();
  ZF_REQUIRE(count > 0, "run.device = \"cuda\" but this process sees no GPU (check the driver and "
             "CUDA_VISIBLE_DEVICES), or set run.device = \"cpu\"");
  int local = runtime.comm->local_rank();
  ZF_REQUIRE(local < count,
             "local rank %d needs GPU %d but this host shows %d GPU(s): start at most %d ranks per host "
             "(one GPU per rank)", local, local, count, count);
  c10::cuda::set_device(c10::DeviceIndex(local));
  // Buffers of many GiB come and go each step (the gradient shard, the gathered blocks) beside
  // ones that stay (an update's device part chosen after the first step): in fixed segments a
  // new buffer may be carved out of a freed one and leave the rest unusable, so a plan that fits
  // by the numbers runs out of memory. Growable segments map what is used and nothing more. A
  // user's own PYTORCH_CUDA_ALLOC_CONF is kept as it is.
  if (!std::getenv("PYTORCH_CUDA_ALLOC_CONF")) c10::CachingAllocator::setAllocatorSettings("expandable_segments:True");
  // torch sets up its CUDA state (the caching allocator among it) on first use; the ledger may
  // allocate before any tensor touches the GPU.
  at::globalContext().lazyInitDevice(c10::DeviceType::CUDA);
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(false, c10::DeviceIndex(local));
  c10::cuda::setCurrentCUDAStream(stream);
  runtime.device = ZF_DEVICE_CUDA;
  runtime.device_index = local;
  runtime.compute_stream = stream.stream();
  runtime.comm_stream = c10::cuda::getStreamFromPool(true, c10::DeviceIndex(local)).stream();
  runtime.memory.set_allocator(ZF_TIER_DEVICE, {device_allocate, device_release});
  runtime.memory.set_allocator(ZF_TIER_PINNED_HOST, {pinned_allocate, pinned_release});
  runtime.timers.set_event_clock(std::make_unique<CudaEventClock>());
  // Under an MPI launcher device buffers go through NCCL, also for one rank (MPI takes host buffers).
  if (runtime.comm->world_size() > 1 || launched_under_mpi())
    runtime.comm = make_nccl_communicator(std::move(runtime.comm), local, comm_timeout_s());
}

void use_deterministic_kernels() {
  setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", 0);  // read when torch creates its cuBLAS handle
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);  // an op without one says so
}

namespace {
uint64_t run_allocated_peak = 0;  // the largest peak before the last reset_device_memory_peak
}  // namespace

DeviceMemory device_memory() {
  auto stats = allocator::getDeviceStats(c10::cuda::current_device());
  const auto all = size_t(c10::CachingAllocator::StatType::AGGREGATE);
  DeviceMemory m;
  m.allocated = uint64_t(stats.allocated_bytes[all].current);
  m.allocated_peak = uint64_t(stats.allocated_bytes[all].peak);
  m.reserved = uint64_t(stats.reserved_bytes[all].current);
  m.reserved_peak = uint64_t(stats.reserved_bytes[all].peak);
  m.run_allocated_peak = std::max(run_allocated_peak, m.allocated_peak);
  return m;
}

void reset_device_memory_peak() {
  run_allocated_peak = device_memory().run_allocated_peak;
  allocator::resetPeakStats(c10::cuda::current_device());
}

void synchronize_stream(void *stream) {
  if (stream) ZF_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
}

void device_copy(void *to, const void *from, uint64_t bytes, void *stream) {
  if (to == from || bytes == 0) return;
  ZF_CUDA_CHECK(cudaMemcpyAsync(to, from, size_t(bytes), cudaMemcpyDefault, static_cast<cudaStream_t>(stream)));
}

namespace {
// Runs torch work on dst's device, queued on an external stream.
template <typename Work>
void on_stream(const zf_tensor_view &dst, void *stream, Work work) {
  if (dst.numel == 0) return;
  auto index = c10::DeviceIndex(dst.device_index);
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(stream), index));
  work();
}
}  // namespace

void device_accumulate(const zf_tensor_view &dst, const zf_tensor_view &src, void *stream) {
  on_stream(dst, stream, [&] { tensor_of(dst).add_(tensor_of(src)); });
}

void device_convert(const zf_tensor_view &dst, const zf_tensor_view &src, void *stream) {
  on_stream(dst, stream, [&] { tensor_of(dst).copy_(tensor_of(src)); });
}

void *record_event(void *stream) {
  if (!stream) return nullptr;
  cudaEvent_t event = ordering_events().take();
  ZF_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(stream)));
  return event;
}

void wait_event(void *stream, void *event) {
  if (!event) return;
  ZF_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0));
  ordering_events().give_back(static_cast<cudaEvent_t>(event));  // the wait holds what it needs
}

void synchronize_event(void *event) {
  if (!event) return;
  ZF_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)));
  ordering_events().give_back(static_cast<cudaEvent_t>(event));
}

bool event_completed(void *event) {
  if (!event) return true;
  const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (status == cudaErrorNotReady) return false;
  ZF_CUDA_CHECK(status);
  return true;
}

uint64_t device_free_bytes() {
  size_t free = 0, total = 0;
  ZF_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  return free;
}

void use_device_on_this_thread(const Runtime &runtime) {
  if (runtime.device == ZF_DEVICE_CUDA) ZF_CUDA_CHECK(cudaSetDevice(runtime.device_index));
}

void *create_stream() {
  cudaStream_t stream = nullptr;  // lives as long as the process: plugins may use it until exit
  ZF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

}  // namespace zf

#else  // CPU build

namespace zf {

namespace {
[[noreturn]] void no_cuda(const char *what) {
  throw Error(format("%s: this zfcore was built without the CUDA path; rebuild with -DZF_CUDA=ON (CUDA toolkit, "
                     "NCCL and a CUDA libtorch), or set run.device = \"cpu\"", what));
}
}  // namespace

bool cuda_built() { return false; }
int cuda_device_count() { return 0; }
void use_cuda_device(Runtime &) { no_cuda("run.device = \"cuda\""); }
void use_deterministic_kernels() {}  // CPU kernels of a run already repeat bit for bit
DeviceMemory device_memory() { return {}; }
uint64_t device_free_bytes() { return 0; }
void reset_device_memory_peak() {}
void synchronize_stream(void *) {}
void device_copy(void *, const void *, uint64_t, void *) { no_cuda("device copy"); }
void device_accumulate(const zf_tensor_view &, const zf_tensor_view &, void *) { no_cuda("device accumulate"); }
void device_convert(const zf_tensor_view &, const zf_tensor_view &, void *) { no_cuda("device convert"); }
void *record_event(void *) { return nullptr; }
void wait_event(void *, void *) {}
void synchronize_event(void *) {}
bool event_completed(void *) { return true; }
void use_device_on_this_thread(const Runtime &) {}
void *create_stream() { return nullptr; }
std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator>, int, double) {
  no_cuda("NCCL communicator");
}

}  // namespace zf

#endif
