// suite_scale.cpp: `zfcore bench scale`: the rows people run a model too large for its GPUs with
// (ZeRO-3 with the optimizer on the host, offload.ratio = "auto", ZenFlow) and what decides
// whether they are worth running: the model FLOPs utilisation, the GPU's own compute per step and
// its share of the step (practicality), memory per rank beside the estimate, and the time to the
// first step. The rows run like every suite's (suite_run.cpp); this file adds their figures.
#include "bench/suite.hpp"

#include "bench/offload_floor.hpp"

#include "config/config.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cstdio>

namespace zf {
namespace {

std::string bytes_or_dash(uint64_t bytes) { return bytes ? format_bytes(bytes) : "-"; }

}  // namespace

std::pair<double, std::string> gpu_peak_flops(const std::string &device, double tflops) {
  if (tflops > 0) return {tflops * 1e12, format("--peak-tflops %g", tflops)};
  if (device != "cuda") return {0, "no GPU peak on a CPU run (--peak-tflops X sets one)"};
  std::string name;
  if (std::FILE *pipe = popen("nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null", "r")) {
    char line[256] = {};
    if (std::fgets(line, sizeof line, pipe)) name = line;
    pclose(pipe);
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  // Dense bf16 tensor-core peaks from NVIDIA's data sheets (the sparse figures are twice these).
  if (name.find("H200") != std::string::npos) return {989.4e12, name + ": 989 TFLOP/s dense bf16 (as H100 SXM)"};
  if (name.find("H100") != std::string::npos && name.find("PCIe") != std::string::npos)
    return {756e12, name + ": 756 TFLOP/s dense bf16 (H100 PCIe)"};
  if (name.find("H100") != std::string::npos) return {989.4e12, name + ": 989 TFLOP/s dense bf16 (H100 SXM)"};
  if (name.find("A100") != std::string::npos) return {312e12, name + ": 312 TFLOP/s dense bf16 (A100)"};
  return {0, "GPU '" + name + "' has no peak in this table: give --peak-tflops X"};
}

double model_parameters(const RunConfig &config) {
  // A mixture of experts computes with its active parameters (the top k experts), the MFU's count.
  if (is_transformer_config(config)) return double(transformer_options(config).shape.active_parameter_count());
  const double hidden = double(config.integer("model", "hidden")), layers = double(config.integer("model", "layers"));
  return layers * (hidden * hidden + hidden);  // linear_stack: a weight and a bias per layer
}

void scale_figures(std::vector<RowResult> &rows, const SuiteReport &report, int ranks) {
  for (RowResult &r : rows) {
    if (r.status != "ok" || r.mean_step_ms <= 0) continue;
    const double step_s = r.mean_step_ms / 1e3, tokens_per_step = r.tokens_per_s * step_s;
    r.practicality = r.compute_ms / r.mean_step_ms;
    if (report.peak_flops > 0)
      r.mfu = 6 * report.parameters * tokens_per_step / (step_s * double(ranks) * report.peak_flops);
  }
}

void print_scale_table(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows) {
  std::vector<std::vector<std::string>> table{{"config", "status", "step ms", "floor ms", "/ floor", "tokens/s", "MFU",
                                               "compute ms",
                                               "practicality", "GPU peak", "est. GPU", "pinned/rank", "est. pinned",
                                               "host RSS", "first step s", "message"}};
  for (const RowResult &r : rows) {
    const bool ok = r.status == "ok", floor = ok && r.floor_ms > 0;
    table.push_back({r.row.name, r.status, ok ? format("%.1f", r.mean_step_ms) : "-",
                     floor ? format("%.1f", r.floor_ms) : "-", floor ? format("%.2f", r.step_over_floor()) : "-",
                     ok ? format("%.0f", r.tokens_per_s) : "-",
                     ok && r.mfu > 0 ? format("%.1f%%", 100 * r.mfu) : "-", ok ? format("%.1f", r.compute_ms) : "-",
                     ok ? format("%.1f%%", 100 * r.practicality) : "-", bytes_or_dash(r.gpu_peak),
                     bytes_or_dash(r.estimate_device), bytes_or_dash(r.pinned_peak), bytes_or_dash(r.estimate_pinned),
                     bytes_or_dash(r.host_rss), ok ? format("%.1f", r.startup_s) : "-", ok ? "" : r.message});
  }
  std::printf("zfcore bench scale: %s, %d rank%s, %.2fB parameters active per token, %lld timed steps after %lld "
              "warm-up step%s%s\n",
              o.device.c_str(), o.ranks, o.ranks == 1 ? "" : "s", report.parameters / 1e9, (long long)o.num_steps,
              (long long)o.warmup_steps, o.warmup_steps == 1 ? "" : "s", warmup_note(o, rows).c_str());
  std::printf("MFU = 6 x parameters (a mixture of experts: active ones) x tokens per step / (step time x %d GPU%s x "
              "peak); peak: %s\n", o.ranks,
              o.ranks == 1 ? "" : "s", report.peak_flops > 0 ? format("%.0f TFLOP/s per GPU, %s", report.peak_flops / 1e12,
                                                                      report.peak_source.c_str()).c_str()
                                                              : report.peak_source.c_str());
  std::printf("compute = fwd + bwd on the GPU's stream (their gathers and reductions inside, rank 0) less the "
              "forward's stalls for a deferred update (update_stall); practicality = compute / step; GPU peak: the "
              "allocator's, pinned/rank: the ledger's, rank 0; est.: zfcore estimate's\n");
  print_columns(table);
  std::printf("%s\n", bench::floor_note(o, report.rates).c_str());
}

std::string scale_csv_header() {
  return ",mfu,compute_ms,practicality,estimate_device_bytes,estimate_pinned_bytes";
}

std::string scale_csv_fields(const RowResult &r) {
  return format(",%.4f,%.3f,%.4f,%llu,%llu", r.mfu, r.compute_ms, r.practicality,
                (unsigned long long)r.estimate_device, (unsigned long long)r.estimate_pinned);
}

}  // namespace zf
