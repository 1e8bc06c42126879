// The NCCL communicator (CUDA builds): device buffers go through NCCL on a stream of its own,
// ordered against the caller's stream by events; host buffers and the bootstrap go through the
// wrapped host communicator (MPI). A watchdog thread polls NCCL's asynchronous error state and
// the age of the oldest unfinished collective: an error or a collective older than the timeout
// (a dead or stuck peer) aborts the NCCL communicator and ends every rank, so no rank hangs.
// An NCCL communicator is not thread-safe (a collective and ncclCommGetAsyncError both complete
// the communicator's pending group job): the calls go one at a time, and the watchdog polls only
// when no other thread is inside one.
#if ZF_WITH_CUDA
#include "comm/communicator.hpp"

#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zf {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(zf_dtype dtype) {
  switch (dtype) {
    case ZF_DTYPE_F32: return ncclFloat32;
    case ZF_DTYPE_BF16: return ncclBfloat16;
    case ZF_DTYPE_F16: return ncclFloat16;
    case ZF_DTYPE_F64: return ncclFloat64;
    case ZF_DTYPE_I32: return ncclInt32;
    case ZF_DTYPE_I64: return ncclInt64;
    case ZF_DTYPE_U8: return ncclUint8;
  }
  throw Error(format("NCCL communicator: unsupported dtype %d", int(dtype)));
}

ncclRedOp_t nccl_op(zf_reduce_op op) {
  switch (op) {
    case ZF_REDUCE_SUM: return ncclSum;
    case ZF_REDUCE_MAX: return ncclMax;
    case ZF_REDUCE_MIN: return ncclMin;
  }
  throw Error(format("NCCL communicator: unknown reduce op %d", int(op)));
}

void cuda_check(cudaError_t status, const char *what) {
  if (status != cudaSuccess) throw Error(format("CUDA %s failed: %s", what, cudaGetErrorString(status)));
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(std::unique_ptr<Communicator> host, int device, double timeout_s)
      : host_(std::move(host)), device_(device), timeout_s_(timeout_s) {
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
    // Rank 0 makes the unique id; the host communicator (MPI) carries it to every rank.
    ncclUniqueId id{};
    if (host_->rank() == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host_->broadcast(zf_tensor_view{&id, sizeof id, ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0}, 0, nullptr);
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    // Non-blocking: every NCCL call returns, and a stuck peer shows up as a timeout here.
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, host_->world_size(), id, host_->rank(), &config), "init");
    watchdog_ = std::thread([this] { watch(); });
  }

  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
    if (!aborted_.exchange(true)) {
      cudaStreamSynchronize(stream_);
      ncclCommFinalize(comm_);
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress) std::this_thread::yield();
      ncclCommDestroy(comm_);
    }
    for (auto &pending : pending_) cudaEventDestroy(pending.event);
    for (cudaEvent_t event : spare_) cudaEventDestroy(event);
    cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  int local_rank() const override { return host_->local_rank(); }
  int local_size() const override { return host_->local_size(); }
  std::string name() const override { return "nccl"; }

  void all_reduce(zf_tensor_view buffer, zf_reduce_op op, void *stream) override {
    if (buffer.device == ZF_DEVICE_CPU) return host_->all_reduce(buffer, op, stream);
    enqueue("all_reduce", stream, [&] {
      return ncclAllReduce(buffer.data, buffer.data, buffer.numel, nccl_type(buffer.dtype), nccl_op(op), comm_,
                           stream_);
    });
  }

  void reduce_scatter(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, void *stream) override {
    if (same_place(send, recv, "reduce_scatter")) return host_->reduce_scatter(send, recv, op, stream);
    ZF_REQUIRE(send.dtype == recv.dtype && send.numel == recv.numel * uint64_t(world_size()),
               "reduce_scatter: send must hold world_size x recv elements of the same dtype");
    enqueue("reduce_scatter", stream, [&] {
      return ncclReduceScatter(send.data, recv.data, recv.numel, nccl_type(recv.dtype), nccl_op(op), comm_, stream_);
    });
  }

  void all_gather(zf_tensor_view send, zf_tensor_view recv, void *stream) override {
    if (same_place(send, recv, "all_gather")) return host_->all_gather(send, recv, stream);
    ZF_REQUIRE(send.dtype == recv.dtype && recv.numel == send.numel * uint64_t(world_size()),
               "all_gather: recv must hold world_size x send elements of the same dtype");
    enqueue("all_gather", stream, [&] {
      return ncclAllGather(send.data, recv.data, send.numel, nccl_type(send.dtype), comm_, stream_);
    });
  }

  void reduce(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, int root, void *stream) override {
    if (same_place(send, recv, "reduce")) return host_->reduce(send, recv, op, root, stream);
    ZF_REQUIRE(send.dtype == recv.dtype && send.numel == recv.numel, "reduce: send and recv differ in size or dtype");
    enqueue("reduce", stream, [&] {
      return ncclReduce(send.data, recv.data, send.numel, nccl_type(send.dtype), nccl_op(op), root, comm_, stream_);
    });
  }

  void broadcast(zf_tensor_view buffer, int root, void *stream) override {
    if (buffer.device == ZF_DEVICE_CPU) return host_->broadcast(buffer, root, stream);
    enqueue("broadcast", stream, [&] {
      return ncclBroadcast(buffer.data, buffer.data, buffer.numel, nccl_type(buffer.dtype), root, comm_, stream_);
    });
  }

  void barrier() override { host_->barrier(); }

  // The wrapped host communicator's collectives and the NCCL ones wait the same.
  void set_timeout_s(double seconds) override {
    timeout_s_ = seconds;
    host_->set_timeout_s(seconds);
  }

  [[noreturn]] void abort(int exit_code) override {
    abort_nccl();
    host_->abort(exit_code);
  }

 private:
  struct Pending {
    cudaEvent_t event;
    const char *what;
    Clock::time_point since;
  };

  // True for host buffers (the host communicator's job); device buffers on both sides otherwise.
  static bool same_place(const zf_tensor_view &send, const zf_tensor_view &recv, const char *what) {
    ZF_REQUIRE(send.device == recv.device, "%s: send and receive buffers are on different devices", what);
    return send.device == ZF_DEVICE_CPU;
  }

  // The collective runs on stream_ after what the caller's stream has queued, and the caller's
  // stream continues once it is done; the host does not wait.
  template <class Call>
  void enqueue(const char *what, void *caller, Call call) {
    auto caller_stream = static_cast<cudaStream_t>(caller);
    std::lock_guard<std::mutex> one_at_a_time(calls_);
    cuda_check(cudaEventRecord(ready_, caller_stream), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
    check(call(), what);
    cudaEvent_t done = take_event();
    cuda_check(cudaEventRecord(done, stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(caller_stream, done, 0), "cudaStreamWaitEvent");
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.push_back(Pending{done, what, Clock::now()});
  }

  cudaEvent_t take_event() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!spare_.empty()) {
      cudaEvent_t event = spare_.back();
      spare_.pop_back();
      return event;
    }
    cudaEvent_t event = nullptr;
    cuda_check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate");
    return event;
  }

  // A call on the non-blocking communicator may still be in progress: wait for it, within the
  // timeout, and turn any failure into an error that names the call and this rank.
  void check(ncclResult_t result, const char *what) {
    auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s_.load());
    while (result == ncclInProgress && comm_) {
      if (Clock::now() > deadline) fail(what, ncclInProgress);
      std::this_thread::yield();
      if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) break;
    }
    if (result != ncclSuccess) fail(what, result);
  }

  [[noreturn]] void fail(const char *what, ncclResult_t result) {
    std::string detail = comm_ ? ncclGetLastError(comm_) : "";
    std::string message =
        result == ncclInProgress
            ? format("NCCL %s on rank %d did not finish within %.0f s (ZF_COMM_TIMEOUT_S): a peer is dead, stuck "
                     "or never joined", what, rank(), timeout_s_.load())
            : format("NCCL %s failed on rank %d: %s%s%s", what, rank(), ncclGetErrorString(result),
                     detail.empty() ? "" : ": ", detail.c_str());
    abort_nccl();
    throw Error(message);
  }

  // Aborts the NCCL communicator once, so kernels waiting for peers give up; waits for that at
  // most 2 s on a helper thread, since ending the job must not hang on a stuck communicator.
  void abort_nccl() {
    if (!comm_ || aborted_.exchange(true)) return;
    auto done = std::make_shared<std::atomic<bool>>(false);
    std::thread([comm = comm_, done] {
      ncclCommAbort(comm);
      *done = true;
    }).detach();
    for (int i = 0; i < 40 && !*done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }

  // The watchdog: asynchronous NCCL errors and collectives older than the timeout end the job.
  void watch() {
    cudaSetDevice(device_);
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
      wake_.wait_for(lock, std::chrono::milliseconds(50));
      if (stopping_ || aborted_) break;
      while (!pending_.empty() && cudaEventQuery(pending_.front().event) == cudaSuccess) {
        spare_.push_back(pending_.front().event);
        pending_.pop_front();
      }
      ncclResult_t state = ncclSuccess;
      if (calls_.try_lock()) {  // busy: that call checks the state itself
        ncclCommGetAsyncError(comm_, &state);
        calls_.unlock();
      }
      std::string problem;
      if (state != ncclSuccess && state != ncclInProgress)
        problem = format("NCCL reported an asynchronous error on rank %d: %s: %s", rank(), ncclGetErrorString(state),
                         ncclGetLastError(comm_));
      else if (!pending_.empty() &&
               std::chrono::duration<double>(Clock::now() - pending_.front().since).count() > timeout_s_.load())
        problem = format("NCCL %s on rank %d did not finish within %.0f s (ZF_COMM_TIMEOUT_S): a peer is dead, "
                         "stuck or never joined", pending_.front().what, rank(), timeout_s_.load());
      if (problem.empty()) continue;
      log_error(problem + "; ending every rank");
      lock.unlock();
      abort(1);
    }
  }

  std::unique_ptr<Communicator> host_;
  int device_;
  std::atomic<double> timeout_s_;  // read by the watchdog
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
  std::atomic<bool> aborted_{false};
  std::mutex calls_;  // held around every call on comm_ but ncclCommAbort (taken before mutex_)
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(std::unique_ptr<Communicator> host, int device,
                                                     double timeout_s) {
  return std::make_unique<NcclCommunicator>(std::move(host), device, timeout_s);
}

}  // namespace zf
#endif
