#include "bench/offload_floor.hpp"

#include "bench/memory_bandwidth.hpp"
#include "runtime/affinity.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <tuple>
#include <utility>

namespace zf::bench {
namespace {

constexpr int kPasses = 3;  // the best of three: the rate the machine can reach

// Elements of each of the Adam-shaped probe's four fp32 arrays: 512 MiB in all, well past any cache.
constexpr uint64_t kProbeNumel = uint64_t(32) << 20;
constexpr int64_t kCopyBytes = int64_t(256) << 20;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Bytes per second of the fastest of kPasses copies of src into dst.
double copy_rate(torch::Tensor dst, const torch::Tensor &src) {
  dst.copy_(src, /*non_blocking=*/true);  // the first touch, not timed
  torch::cuda::synchronize();
  double best = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) {
    auto start = std::chrono::steady_clock::now();
    dst.copy_(src, /*non_blocking=*/true);
    torch::cuda::synchronize();
    best = std::min(best, seconds_since(start));
  }
  return double(src.nbytes()) / best;
}

// PCIe down and up, measured in a child process: the suite's own process, which launches the rows,
// holds no CUDA context (and no GPU memory) while they run. {0, 0} if the child fails.
std::pair<double, double> pcie_rates() {
  double rates[2] = {0, 0};
  int fds[2];
  if (::pipe(fds) != 0) return {0, 0};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    try {
      const auto bytes = torch::TensorOptions().dtype(torch::kUInt8);
      torch::Tensor host = torch::empty({kCopyBytes}, bytes.pinned_memory(true));
      torch::Tensor gpu = torch::empty({kCopyBytes}, bytes.device(torch::kCUDA));
      rates[0] = copy_rate(host, gpu);
      rates[1] = copy_rate(gpu, host);
      if (::write(fds[1], rates, sizeof rates) != ssize_t(sizeof rates)) ::_exit(1);
    } catch (...) {
      ::_exit(1);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  if (pid > 0 && ::read(fds[0], rates, sizeof rates) != ssize_t(sizeof rates)) rates[0] = rates[1] = 0;
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return {rates[0], rates[1]};
}

}  // namespace

LinkRates measure_link_rates(const std::string &device) {
  LinkRates rates;
  if (device == "cuda") std::tie(rates.down_bytes_per_s, rates.up_bytes_per_s) = pcie_rates();
  const std::vector<int> cores = physical_cores(allowed_cores());
  MemoryProbe probe(kProbeNumel, cores, unsigned(std::max<size_t>(1, cores.size())));
  double best = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) best = std::min(best, probe.adam_shaped_seconds());
  rates.host_bytes_per_s = 28.0 * double(probe.numel()) / best;  // read p, g, m, v; write p, m, v
  return rates;
}

double floor_ms(const RowResult &row, const LinkRates &rates, int ranks) {
  double seconds = 0;
  if (rates.host_bytes_per_s > 0)
    seconds = std::max(seconds, row.host_update_bytes_per_step * double(ranks) / rates.host_bytes_per_s);
  if (rates.down_bytes_per_s > 0) seconds = std::max(seconds, row.down_bytes_per_step / rates.down_bytes_per_s);
  if (rates.up_bytes_per_s > 0) seconds = std::max(seconds, row.up_bytes_per_step / rates.up_bytes_per_s);
  return seconds * 1e3;
}

}  // namespace zf::bench
