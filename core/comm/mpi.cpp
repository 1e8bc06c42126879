// The MPI communicator for CPU buffers, used when the process was started by mpirun. Half
// precision (bf16, fp16) goes through a 2-byte datatype with our own reduction operators.
#include "comm/communicator.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <zf/zf_plugin.hpp>

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
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
  }

  ~MpiCommunicator() override {
    for (auto *ops : {bf16_ops_, f16_ops_})
      for (int i = 0; i < 3; ++i) MPI_Op_free(&ops[i]);
    MPI_Type_free(&half_);
    MPI_Comm_free(&local_);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }
  std::string name() const override { return "mpi"; }

  void all_reduce(zf_tensor_view buffer, zf_reduce_op op, void *) override {
    require_cpu(buffer, "all_reduce");
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
    check(MPI_Allgather(send.data, int(send.numel), type(send.dtype), recv.data, int(send.numel),
                        type(recv.dtype), MPI_COMM_WORLD),
          "all_gather");
  }

  void reduce(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, int root, void *) override {
    require_cpu(send, "reduce");
    require_cpu(recv, "reduce");
    ZF_REQUIRE(send.dtype == recv.dtype && send.numel == recv.numel, "reduce: send and recv differ in size or dtype");
    ZF_REQUIRE(send.numel <= uint64_t(INT_MAX), "reduce: over 2^31 elements");
    check(MPI_Reduce(send.data, recv.data, int(send.numel), type(send.dtype), mpi_op(send.dtype, op), root,
                     MPI_COMM_WORLD),
          "reduce");
  }

  void broadcast(zf_tensor_view buffer, int root, void *) override {
    require_cpu(buffer, "broadcast");
    const uint64_t chunk = uint64_t(INT_MAX) / 2;
    char *data = static_cast<char *>(buffer.data);
    size_t element = dtype_size(buffer.dtype);
    for (uint64_t done = 0; done < buffer.numel; done += chunk) {
      int count = int(std::min<uint64_t>(chunk, buffer.numel - done));
      check(MPI_Bcast(data + done * element, count, type(buffer.dtype), root, MPI_COMM_WORLD),
            "broadcast");
    }
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "barrier"); }

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
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

}  // namespace zf
