#include "bench/offload_floor.hpp"

#include "bench/memory_bandwidth.hpp"
#include "runtime/affinity.hpp"
#include "runtime/error.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

namespace zf::bench {
namespace {

constexpr int kPasses = 3;  // the best of three: the rate the machine can reach

// Elements of each of the Adam-shaped probe's four fp32 arrays: 1 GiB in all, well past any cache.
constexpr uint64_t kProbeNumel = uint64_t(64) << 20;
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

bool has_floor(const std::string &suite) { return suite == "offload" || suite == "scale"; }

void set_floors(std::vector<RowResult> &rows, const SuiteOptions &o, const LinkRates &rates) {
  if (!has_floor(o.suite)) return;
  // offload: the GPU's step without offload, the mean of its trials; not on a CPU (above).
  double none_ms = 0, trials = 0;
  for (const RowResult &r : rows)
    if (r.status == "ok" && r.row.name == "none" && o.device == "cuda") none_ms += r.mean_step_ms, ++trials;
  if (trials > 0) none_ms /= trials;
  for (RowResult &r : rows)
    if (r.status == "ok")
      r.floor_ms = floor_ms(r, rates, o.ranks, o.suite == "scale" ? r.compute_ms : none_ms);
}

std::string floor_note(const SuiteOptions &o, const LinkRates &rates) {
  std::string pcie = rates.down_bytes_per_s > 0
                         ? format("the PCIe bytes each way over the link's rate (%.1f GB/s down, %.1f GB/s up)",
                                  rates.down_bytes_per_s / 1e9, rates.up_bytes_per_s / 1e9)
                         : "the PCIe bytes each way over the link's rate (not measured on a CPU run)";
  std::string compute = o.suite == "scale" ? "the row's own compute (fwd + bwd less update_stall)"
                        : o.device == "cuda" ? "the none row's step"
                                             : "";
  return format("floor: the CPU update's bytes per step over the host's memory bandwidth (%.1f GB/s, Adam-shaped, "
                "shared by %d rank%s), %s%s%s, whichever is longer; / floor = step ms / floor ms",
                rates.host_bytes_per_s / 1e9, o.ranks, o.ranks == 1 ? "" : "s", pcie.c_str(),
                compute.empty() ? "" : " or ", compute.c_str());
}

}  // namespace zf::bench
