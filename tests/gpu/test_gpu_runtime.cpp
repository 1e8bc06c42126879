// The CUDA runtime pieces: the memory ledger's device tier is the caching allocator's memory,
// CUDA-event timers measure stream time, and the NCCL communicator computes what the MPI one
// computes (one rank in process; two ranks under mpirun where two GPUs exist).
#include "gpu_skip.hpp"

#include "params/flat_buffers.hpp"
#include "runtime/device.hpp"
#include "runtime/runtime.hpp"
#include "support/process.hpp"
#include "update/device_room.hpp"

#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <unistd.h>

using namespace zf;

TEST_CASE("the device tier of the ledger matches the caching allocator", "[gpu]") {
  test::require_gpus(1);
  auto runtime = Runtime::single_cpu();
  use_cuda_device(*runtime);
  synchronize_stream(runtime->compute_stream);
  DeviceMemory before = device_memory();
  std::vector<uint64_t> sizes = {4096, 1 << 20, (3u << 20) + 100, 40000};
  std::vector<void *> blocks;
  uint64_t requested = 0, rounded = 0;
  for (uint64_t bytes : sizes) {
    blocks.push_back(runtime->memory.allocate(ZF_TIER_DEVICE, bytes, "test.block"));
    requested += bytes;
    rounded += (bytes + MemoryLedger::kAlignment - 1) / MemoryLedger::kAlignment * MemoryLedger::kAlignment;
  }
  DeviceMemory during = device_memory();
  CHECK(runtime->memory.current(ZF_TIER_DEVICE) == requested);
  CHECK(during.allocated - before.allocated == rounded);
  CHECK(during.allocated_peak >= during.allocated);
  CHECK(runtime->memory.current_by_tag(ZF_TIER_DEVICE).at("test.block") == requested);
  // A ledger tensor on the device tier is zeroed and lives on the GPU.
  torch::Tensor zeros = ledger_tensor(runtime->memory, ZF_TIER_DEVICE, 1000, torch::kFloat32, "test.tensor");
  CHECK(zeros.is_cuda());
  CHECK(zeros.abs().sum().item<double>() == 0.0);
  zeros = torch::Tensor();
  for (void *block : blocks) runtime->memory.release(block);
  CHECK(runtime->memory.current(ZF_TIER_DEVICE) == 0);
  CHECK(runtime->memory.peak(ZF_TIER_DEVICE) >= requested);
  CHECK(device_memory().allocated == before.allocated);
  // Pinned host memory comes from the CUDA layer now and is accounted the same way.
  void *pinned = runtime->memory.allocate(ZF_TIER_PINNED_HOST, 1 << 20, "test.pinned");
  CHECK(runtime->memory.current(ZF_TIER_PINNED_HOST) == (1u << 20));
  runtime->memory.release(pinned);
}

// offload.ratio and zenflow.topk_ratio "auto" choose after the first step, whose report has reset
// the allocator's peak: the room they fill must still leave out that step's peak (a 32B run chose
// a device part from the few GiB held between steps, then ran out of memory).
TEST_CASE("an auto choice after a step's report leaves out that step's peak", "[gpu]") {
  test::require_gpus(1);
  auto runtime = Runtime::single_cpu();
  use_cuda_device(*runtime);
  const uint64_t big = uint64_t(1) << 30;
  runtime->memory.release(runtime->memory.allocate(ZF_TIER_DEVICE, big, "test.step_peak"));
  synchronize_stream(runtime->compute_stream);
  reset_device_memory_peak();  // what each step's report does
  const DeviceMemory after = device_memory();
  CHECK(after.allocated_peak < big);
  CHECK(after.run_allocated_peak >= big);
  const DeviceRoom room = device_room(*runtime, ZF_TIER_DEVICE);
  REQUIRE(room.known);
  const uint64_t capacity = device_free_bytes() + after.reserved;
  CHECK(room.left + big + capacity / 10 <= capacity);
}

TEST_CASE("CUDA-event timers measure the stream and not the host", "[gpu]") {
  test::require_gpus(1);
  auto runtime = Runtime::single_cpu();
  use_cuda_device(*runtime);
  uint32_t timer = runtime->timers.id("matmul");
  torch::Tensor a = torch::randn({4096, 4096}, torch::TensorOptions().device(torch::kCUDA));
  torch::Tensor b = a.matmul(a);  // warm up cuBLAS
  synchronize_stream(runtime->compute_stream);
  runtime->timers.reset();
  auto started = std::chrono::steady_clock::now();
  runtime->timers.start(timer, runtime->compute_stream);
  for (int i = 0; i < 20; ++i) b = a.matmul(b);
  runtime->timers.stop(timer, runtime->compute_stream);
  double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
  double device_ms = runtime->timers.elapsed_ms(timer);  // waits for the stop event only
  INFO("host " << host_ms << " ms, device " << device_ms << " ms");
  CHECK(device_ms > 0);
  CHECK(runtime->timers.snapshot().size() == 1);
  // 20 matmuls of 4096^3 take far longer on the device than enqueueing them takes on the host.
  CHECK(device_ms > host_ms);
}

namespace {

// Runs every collective with both communicators on rank-dependent data and compares.
void compare_collectives(Communicator &host, Communicator &nccl, torch::Device device, void *stream) {
  const int rank = host.rank(), world = host.world_size();
  REQUIRE(nccl.world_size() == world);
  REQUIRE(nccl.rank() == rank);
  const int64_t n = 1000;
  for (torch::Dtype dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << c10::toString(dtype) << ", rank " << rank << " of " << world);
    torch::Tensor data = (torch::arange(n * world, torch::kFloat32) * 0.25 + rank).to(dtype);
    auto on_gpu = [&](const torch::Tensor &t) { return t.to(device).contiguous(); };
    auto same = [&](const torch::Tensor &gpu, const torch::Tensor &cpu) {
      synchronize_stream(stream);
      return torch::equal(gpu.cpu(), cpu);
    };
    for (zf_reduce_op op : {ZF_REDUCE_SUM, ZF_REDUCE_MAX}) {
      torch::Tensor cpu = data.clone(), gpu = on_gpu(data);
      host.all_reduce(view_of(cpu), op, nullptr);
      nccl.all_reduce(view_of(gpu), op, stream);
      CHECK(same(gpu, cpu));
    }
    torch::Tensor send = data.narrow(0, 0, n).contiguous();
    torch::Tensor gathered_cpu = torch::zeros({n * world}, dtype), gathered_gpu = on_gpu(gathered_cpu);
    torch::Tensor send_gpu = on_gpu(send);
    host.all_gather(view_of(send), view_of(gathered_cpu), nullptr);
    nccl.all_gather(view_of(send_gpu), view_of(gathered_gpu), stream);
    CHECK(same(gathered_gpu, gathered_cpu));
    // In place (plugin ABI 1.10): send is this rank's part of recv; the oracle is the gather above.
    torch::Tensor in_place_cpu = torch::zeros({n * world}, dtype);
    in_place_cpu.narrow(0, rank * n, n).copy_(send);
    torch::Tensor in_place_gpu = on_gpu(in_place_cpu);
    host.all_gather(view_of(in_place_cpu.narrow(0, rank * n, n)), view_of(in_place_cpu), nullptr);
    nccl.all_gather(view_of(in_place_gpu.narrow(0, rank * n, n)), view_of(in_place_gpu), stream);
    CHECK(torch::equal(in_place_cpu, gathered_cpu));
    CHECK(same(in_place_gpu, gathered_cpu));
    torch::Tensor shard_cpu = torch::zeros({n}, dtype), shard_gpu = on_gpu(shard_cpu), data_gpu = on_gpu(data);
    host.reduce_scatter(view_of(data), view_of(shard_cpu), ZF_REDUCE_SUM, nullptr);
    nccl.reduce_scatter(view_of(data_gpu), view_of(shard_gpu), ZF_REDUCE_SUM, stream);
    CHECK(same(shard_gpu, shard_cpu));
    torch::Tensor root_cpu = data.clone(), root_gpu = on_gpu(data);
    host.broadcast(view_of(root_cpu), 0, nullptr);
    nccl.broadcast(view_of(root_gpu), 0, stream);
    CHECK(same(root_gpu, root_cpu));
    // Host buffers given to the NCCL communicator go through its host communicator.
    torch::Tensor host_buffer = data.clone(), expected = data.clone();
    nccl.all_reduce(view_of(host_buffer), ZF_REDUCE_SUM, nullptr);
    host.all_reduce(view_of(expected), ZF_REDUCE_SUM, nullptr);
    CHECK(torch::equal(host_buffer, expected));
  }
}

std::string self_path() {
  char path[4096] = {};
  ssize_t length = readlink("/proc/self/exe", path, sizeof path - 1);
  return std::string(path, size_t(length > 0 ? length : 0));
}

}  // namespace

TEST_CASE("the NCCL communicator agrees with the host communicator on one rank", "[gpu][comm]") {
  test::require_gpus(1);
  auto runtime = Runtime::single_cpu();
  use_cuda_device(*runtime);
  auto host = make_cpu_communicator();
  auto nccl = make_nccl_communicator(make_cpu_communicator(), runtime->device_index, 60);
  CHECK(nccl->name() == "nccl");
  compare_collectives(*host, *nccl, torch::Device(torch::kCUDA, runtime->device_index), runtime->compute_stream);
}

// The body of the 2-rank cases, started by them under mpirun (hidden from ordinary runs).
TEST_CASE("NCCL rank worker", "[.nccl-worker]") {
  auto runtime = Runtime::single_cpu();  // MPI under mpirun
  use_cuda_device(*runtime);             // world size 2: device buffers through NCCL
  auto host = make_cpu_communicator();
  REQUIRE(runtime->comm->name() == "nccl");
  const char *mode = std::getenv("ZF_TEST_NCCL_MODE");
  if (mode && std::string(mode) == "stall") {
    // Rank 1 never joins the collective: rank 0 must end the job, from the watchdog (the
    // collective was enqueued) or from the call itself (it never got going). As in zfcore run,
    // an error on one rank ends every rank.
    try {
      if (runtime->comm->rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(120));
      torch::Tensor buffer = torch::ones({1 << 20}, torch::TensorOptions().device(torch::kCUDA));
      runtime->comm->all_reduce(view_of(buffer), ZF_REDUCE_SUM, runtime->compute_stream);
      synchronize_stream(runtime->compute_stream);
      std::this_thread::sleep_for(std::chrono::seconds(120));
    } catch (const std::exception &error) {
      std::fprintf(stderr, "rank %d: %s\n", runtime->comm->rank(), error.what());
      runtime->comm->abort(1);
    }
    return;
  }
  compare_collectives(*host, *runtime->comm, torch::Device(torch::kCUDA, runtime->device_index),
                      runtime->compute_stream);
}

TEST_CASE("the NCCL communicator agrees with MPI on 2 ranks", "[gpu][comm][mpi]") {
  test::require_gpus(2);
  auto outcome = test::run_command("timeout 300 " + test::mpirun(2) + "-x ZF_TEST_NCCL_MODE=compare " + self_path() +
                                   " \"NCCL rank worker\"");
  INFO(outcome.output);
  CHECK(outcome.exit_code == 0);
}

TEST_CASE("a rank that never joins an NCCL collective ends every rank with a message", "[gpu][comm][mpi]") {
  test::require_gpus(2);
  auto started = std::chrono::steady_clock::now();
  auto outcome = test::run_command("timeout 200 " + test::mpirun(2) + "-x ZF_COMM_TIMEOUT_S=5 -x ZF_TEST_NCCL_MODE=stall " +
                                   self_path() + " \"NCCL rank worker\"");
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(outcome.output);
  CHECK(outcome.exit_code != 0);
  CHECK(outcome.exit_code != 124);  // ended by the watchdog, not by the timeout
  CHECK(seconds < 90);
  CHECK_THAT(outcome.output, Catch::Contains("did not finish within 5 s"));
}
