// The MPI communicator for CPU buffers, used when the process was started by mpirun. Half
// precision (bf16, fp16) goes through a 2-byte datatype with our own reduction operators.
#include "comm/communicator.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <zf/zf_plugin.hpp>

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstring>

namespace zf {
namespace {

template <class Convert>
void reduce_half(void *in, void *inout, int *len, zf_reduce_op op, Convert convert) {
  auto *a = static_cast<uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = convert.to_float(a[i]), y = convert.to_float(b[i]);
    float r = op == ZF_REDUCE_SUM ? x + y : op == ZF_REDUCE_MAX ? std::fmax(x, y) : std::fmin(x, y);
    b[i] = convert.from_float(r);
  }
}

struct Bf16 {
  float to_float(uint16_t v) const { return bf16_to_float(v); }
  uint16_t from_float(float v) const { return float_to_bf16(v); }
};
struct F16 {
  float to_float(uint16_t v) const { return f16_to_float(v); }
  uint16_t from_float(float v) const { return float_to_f16(v); }
};

#define ZF_HALF_OP(NAME, TYPE, OP)                                             \
  void NAME(void *in, void *inout, int *len, MPI_Datatype *) {                 \
    reduce_half(in, inout, len, OP, TYPE{});                                   \
  }
ZF_HALF_OP(bf16_sum, Bf16, ZF_REDUCE_SUM)
ZF_HALF_OP(bf16_max, Bf16, ZF_REDUCE_MAX)
ZF_HALF_OP(bf16_min, Bf16, ZF_REDUCE_MIN)
ZF_HALF_OP(f16_sum, F16, ZF_REDUCE_SUM)
ZF_HALF_OP(f16_max, F16, ZF_REDUCE_MAX)
ZF_HALF_OP(f16_min, F16, ZF_REDUCE_MIN)
#undef ZF_HALF_OP

// A collective that has not finished after the timeout ends this rank with a message. A peer
// process that dies closes its connections and Open MPI ends the job at once; a host that
// vanishes from the network (power, cable, a cut link) closes nothing, and without this every
// rank of the other hosts would wait forever. The launcher sees the rank end and ends the job.
class CollectiveWatchdog {
 public:
  CollectiveWatchdog(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s), thread_([this] { watch(); }) {}
  ~CollectiveWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

  void set_timeout_s(double seconds) { timeout_s_.store(seconds); }

  // Marks one collective in flight on the calling (MPI) thread for its lifetime.
  class Scope {
   public:
    Scope(CollectiveWatchdog &dog, const char *op) : dog_(dog) {
      dog_.op_.store(op);
      dog_.started_ns_.store(now_ns());
    }
    ~Scope() { dog_.started_ns_.store(0); }
    Scope(const Scope &) = delete;
    Scope &operator=(const Scope &) = delete;

   private:
    CollectiveWatchdog &dog_;
  };

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stop_; })) {
      const int64_t started = started_ns_.load();
      const double timeout_s = timeout_s_.load();
      if (started == 0 || double(now_ns() - started) < timeout_s * 1e9) continue;
      std::fprintf(stderr,
                   "zfcore: MPI %s on rank %d did not finish within %.0f s (run.comm_timeout_s): a peer rank is "
                   "dead or stuck, or its host is unreachable; this rank ends. Raise run.comm_timeout_s if a "
                   "collective can legitimately take that long here.\n",
                   op_.load(), rank_, timeout_s);
      std::fflush(stderr);
      std::fflush(stdout);
      std::_Exit(1);  // MPI_Abort would wait on the peers that are gone
    }
  }

  const int rank_;
  std::atomic<double> timeout_s_;
  std::atomic<int64_t> started_ns_{0};  // 0: no collective in flight
  std::atomic<const char *> op_{""};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is set
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owns_mpi_ = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local_);
    MPI_Comm_rank(local_, &local_rank_);
    MPI_Comm_size(local_, &local_size_);
    MPI_Type_contiguous(2, MPI_BYTE, &half_);
    MPI_Type_commit(&half_);
    MPI_Op_create(bf16_sum, 1, &bf16_ops_[ZF_REDUCE_SUM]);
    MPI_Op_create(bf16_max, 1, &bf16_ops_[ZF_REDUCE_MAX]);
    MPI_Op_create(bf16_min, 1, &bf16_ops_[ZF_REDUCE_MIN]);
    MPI_Op_create(f16_sum, 1, &f16_ops_[ZF_REDUCE_SUM]);
    MPI_Op_create(f16_max, 1, &f16_ops_[ZF_REDUCE_MAX]);
    MPI_Op_create(f16_min, 1, &f16_ops_[ZF_REDUCE_MIN]);
    watchdog_ = std::make_unique<CollectiveWatchdog>(rank_, comm_timeout_s());
  }

  ~MpiCommunicator() override {
    watchdog_.reset();
    for (auto *ops : {bf16_ops_, f16_ops_})
      for (int i = 0; i < 3; ++i) MPI_Op_free(&ops[i]);
    MPI_Type_free(&half_);
    MPI_Comm_free(&local_);
    if (owns_mpi_) MPI_Finalize();
  }

  void set_timeout_s(double seconds) override { watchdog_->set_timeout_s(seconds); }
  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce(zf_tensor_view buffer, zf_reduce_op op, void *) override {
    require_cpu(buffer, "all_reduce");
    CollectiveWatchdog::Scope in_flight(*watchdog_, "all_reduce");
    // MPI counts are int: large buffers go in chunks.
    const uint64_t chunk = uint64_t(INT_MAX) / 2;
    char *data = static_cast<char *>(buffer.data);
    size_t element = dtype_size(buffer.dtype);
    for (uint64_t done = 0; done < buffer.numel; done += chunk) {
      int count = int(std::min<uint64_t>(chunk, buffer.numel - done));
      check(MPI_Allreduce(MPI_IN_PLACE, data + done * element, count, type(buffer.dtype),
                          mpi_op(buffer.dtype, op), MPI_COMM_WORLD),
            "all_reduce");
    }
  }

  void reduce_scatter(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, void *) override {
    require_cpu(send, "reduce_scatter");
    require_cpu(recv, "reduce_scatter");
    ZF_REQUIRE(send.dtype == recv.dtype && send.numel == recv.numel * uint64_t(size_),
               "reduce_scatter: send must hold world_size x recv elements of the same dtype");
    ZF_REQUIRE(recv.numel <= uint64_t(INT_MAX), "reduce_scatter: shard over 2^31 elements");
    CollectiveWatchdog::Scope in_flight(*watchdog_, "reduce_scatter");
    check(MPI_Reduce_scatter_block(send.data, recv.data, int(recv.numel), type(recv.dtype),
                                   mpi_op(recv.dtype, op), MPI_COMM_WORLD),
          "reduce_scatter");
  }

  void all_gather(zf_tensor_view send, zf_tensor_view recv, void *) override {
    require_cpu(send, "all_gather");
    require_cpu(recv, "all_gather");
    ZF_REQUIRE(send.dtype == recv.dtype && recv.numel == send.numel * uint64_t(size_),
               "all_gather: recv must hold world_size x send elements of the same dtype");
    ZF_REQUIRE(send.numel <= uint64_t(INT_MAX), "all_gather: shard over 2^31 elements");
    CollectiveWatchdog::Scope in_flight(*watchdog_, "all_gather");
    // In place (plugin ABI 1.10): send is this rank's part of recv.
    const size_t part = send.numel * dtype_size(send.dtype);
    const bool in_place = send.data == static_cast<char *>(recv.data) + size_t(rank_) * part;
    check(MPI_Allgather(in_place ? MPI_IN_PLACE : send.data, int(send.numel), type(send.dtype), recv.data,
                        int(send.numel), type(recv.dtype), MPI_COMM_WORLD),
          "all_gather");
  }

  void reduce(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, int root, void *) override {
    require_cpu(send, "reduce");
    require_cpu(recv, "reduce");
    ZF_REQUIRE(send.dtype == recv.dtype && send.numel == recv.numel, "reduce: send and recv differ in size or dtype");
    ZF_REQUIRE(send.numel <= uint64_t(INT_MAX), "reduce: over 2^31 elements");
    CollectiveWatchdog::Scope in_flight(*watchdog_, "reduce");
    check(MPI_Reduce(send.data, recv.data, int(send.numel), type(send.dtype), mpi_op(send.dtype, op), root,
                     MPI_COMM_WORLD),
          "reduce");
  }

  void broadcast(zf_tensor_view buffer, int root, void *) override {
    require_cpu(buffer, "broadcast");
    CollectiveWatchdog::Scope in_flight(*watchdog_, "broadcast");
    const uint64_t chunk = uint64_t(INT_MAX) / 2;
    char *data = static_cast<char *>(buffer.data);
    size_t element = dtype_size(buffer.dtype);
    for (uint64_t done = 0; done < buffer.numel; done += chunk) {
      int count = int(std::min<uint64_t>(chunk, buffer.numel - done));
      check(MPI_Bcast(data + done * element, count, type(buffer.dtype), root, MPI_COMM_WORLD),
            "broadcast");
    }
  }

  void barrier() override {
    CollectiveWatchdog::Scope in_flight(*watchdog_, "barrier");
    check(MPI_Barrier(MPI_COMM_WORLD), "barrier");
  }

  [[noreturn]] void abort(int exit_code) override {
    // Let the launcher forward this rank's last words before it tears the job down.
    std::fflush(stdout);
    std::fflush(stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  static void require_cpu(const zf_tensor_view &view, const char *what) {
    ZF_REQUIRE(view.device == ZF_DEVICE_CPU,
               "%s: the MPI communicator takes CPU buffers (device buffers need NCCL)", what);
  }
  MPI_Datatype type(zf_dtype dtype) const {
    switch (dtype) {
      case ZF_DTYPE_F32: return MPI_FLOAT;
      case ZF_DTYPE_F64: return MPI_DOUBLE;
      case ZF_DTYPE_I32: return MPI_INT32_T;
      case ZF_DTYPE_I64: return MPI_INT64_T;
      case ZF_DTYPE_U8: return MPI_UINT8_T;
      case ZF_DTYPE_BF16: case ZF_DTYPE_F16: return half_;
    }
    throw Error(format("MPI communicator: unsupported dtype %d", dtype));
  }
  MPI_Op mpi_op(zf_dtype dtype, zf_reduce_op op) const {
    ZF_REQUIRE(op >= ZF_REDUCE_SUM && op <= ZF_REDUCE_MIN, "unknown reduce op %d", op);
    if (dtype == ZF_DTYPE_BF16) return bf16_ops_[op];
    if (dtype == ZF_DTYPE_F16) return f16_ops_[op];
    return op == ZF_REDUCE_SUM ? MPI_SUM : op == ZF_REDUCE_MAX ? MPI_MAX : MPI_MIN;
  }
  void check(int code, const char *what) const {
    if (code == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    throw Error(format("MPI %s failed on rank %d: %.*s", what, rank_, length, text));
  }

  bool owns_mpi_ = false;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Comm local_ = MPI_COMM_NULL;
  MPI_Datatype half_ = MPI_DATATYPE_NULL;
  MPI_Op bf16_ops_[3]{}, f16_ops_[3]{};
  std::unique_ptr<CollectiveWatchdog> watchdog_;
};

}  // namespace

double comm_timeout_s() {
  const char *text = std::getenv("ZF_COMM_TIMEOUT_S");
  if (!text || !*text) return 600.0;
  char *end = nullptr;
  double value = std::strtod(text, &end);
  ZF_REQUIRE(end && *end == '\0' && value > 0,
             "ZF_COMM_TIMEOUT_S = \"%s\": must be a positive number of seconds", text);
  return value;
}

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace zf
