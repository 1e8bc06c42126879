// The single-process communicator: rank 0 of 1, every collective is the identity (or a copy).
#include "comm/communicator.hpp"

#include "runtime/device.hpp"
#include "runtime/error.hpp"

#include <zf/zf_plugin.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace zf {
namespace {

class SingleCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_size() const override { return 1; }
  std::string name() const override { return "single"; }
  void all_reduce(zf_tensor_view, zf_reduce_op, void *) override {}
  void reduce_scatter(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op, void *stream) override {
    copy(send, recv, stream);
  }
  void all_gather(zf_tensor_view send, zf_tensor_view recv, void *stream) override { copy(send, recv, stream); }
  void broadcast(zf_tensor_view, int, void *) override {}
  void reduce(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op, int, void *stream) override {
    copy(send, recv, stream);
  }
  void barrier() override {}
  [[noreturn]] void abort(int exit_code) override { std::_Exit(exit_code); }

 private:
  static void copy(zf_tensor_view from, zf_tensor_view to, void *stream) {
    ZF_REQUIRE(from.numel == to.numel && from.dtype == to.dtype,
               "collective: send and receive views differ in size or dtype");
    ZF_REQUIRE(from.device == to.device, "collective: send and receive views are on different devices");
    if (from.device == ZF_DEVICE_CUDA) return device_copy(to.data, from.data, from.numel * dtype_size(from.dtype), stream);
    if (from.data != to.data) std::memmove(to.data, from.data, from.numel * dtype_size(from.dtype));
  }
};

}  // namespace

void Communicator::reduce(zf_tensor_view, zf_tensor_view, zf_reduce_op, int, void *) {
  throw Error(format("the %s communicator has no reduce (plugin ABI 1.1)", name().c_str()));
}

std::string first_finding(Communicator &comm, const std::string &mine) {
  int64_t first[1] = {mine.empty() ? comm.world_size() : comm.rank()};
  comm.all_reduce(zf_tensor_view{first, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MIN, nullptr);
  if (first[0] >= comm.world_size()) return "";
  std::vector<char> text(1024, '\0');
  if (comm.rank() == first[0]) std::memcpy(text.data(), mine.data(), std::min(mine.size(), text.size() - 1));
  comm.broadcast(zf_tensor_view{text.data(), text.size(), ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0}, int(first[0]), nullptr);
  return text.data();
}

bool launched_under_mpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MV2_COMM_WORLD_SIZE"})
    if (std::getenv(name)) return true;
  return false;
}

std::unique_ptr<Communicator> make_mpi_communicator();  // comm/mpi.cpp

std::unique_ptr<Communicator> make_cpu_communicator() {
  if (launched_under_mpi()) return make_mpi_communicator();
  return std::make_unique<SingleCommunicator>();
}

}  // namespace zf
