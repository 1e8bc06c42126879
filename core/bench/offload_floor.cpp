#include "bench/offload_floor.hpp"

#include "bench/memory_bandwidth.hpp"
#include "runtime/affinity.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

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

}  // namespace

void measure_pcie(LinkRates &rates) {
  try {
    const auto bytes = torch::TensorOptions().dtype(torch::kUInt8);
    torch::Tensor host = torch::empty({kCopyBytes}, bytes.pinned_memory(true));
    torch::Tensor gpu = torch::empty({kCopyBytes}, bytes.device(torch::kCUDA));
    rates.down_bytes_per_s = copy_rate(host, gpu);
    rates.up_bytes_per_s = copy_rate(gpu, host);
  } catch (const std::exception &e) {
    rates.down_bytes_per_s = rates.up_bytes_per_s = 0;
    std::string what = e.what();
    std::fprintf(stderr, "zfcore bench offload: the PCIe rates could not be measured (%s); the floor column counts "
                 "the host's memory only\n", what.substr(0, what.find('\n')).c_str());
  }
}

LinkRates measure_host_rate() {
  LinkRates rates;
  const std::vector<int> cores = physical_cores(allowed_cores());
  MemoryProbe probe(kProbeNumel, cores, unsigned(std::max<size_t>(1, cores.size())));
  double best = 1e30;
  for (int pass = 0; pass < kPasses; ++pass) best = std::min(best, probe.adam_shaped_seconds());
  rates.host_bytes_per_s = 28.0 * double(probe.numel()) / best;  // read p, g, m, v; write p, m, v
  return rates;
}

double floor_ms(const RowResult &row, const LinkRates &rates, int ranks, double compute_ms) {
  double seconds = 0;
  if (rates.host_bytes_per_s > 0)
    seconds = std::max(seconds, row.host_update_bytes_per_step * double(ranks) / rates.host_bytes_per_s);
  if (rates.down_bytes_per_s > 0) seconds = std::max(seconds, row.down_bytes_per_step / rates.down_bytes_per_s);
  if (rates.up_bytes_per_s > 0) seconds = std::max(seconds, row.up_bytes_per_step / rates.up_bytes_per_s);
  return seconds > 0 ? std::max(seconds * 1e3, compute_ms) : 0;
}

}  // namespace zf::bench
