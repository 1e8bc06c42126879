// run_stats.hpp: what a run measures and reports beside the step loop. RunStats counts samples and
// tokens, turns each step's timers, memory and GPU peaks into a StepRecord (report.hpp writes it)
// and builds summary.json at the end; print_run_start prints the model and plugins; param_digest
// hashes the trained parameters over all shards (the oracle the equivalence tests compare).
#pragma once

#include "report/run_summary.hpp"
#include "memory/memory_plan.hpp"
#include "plugin/plugin_set.hpp"
#include "report/report.hpp"
#include "runtime/device.hpp"

#include <cmath>
#include <map>
#include <functional>
#include <string>

namespace zf {

class RunStats {
 public:
  explicit RunStats(Runtime &runtime) : runtime_(runtime) {}
  void count_batch(int64_t samples, int64_t tokens);
  // GPU runs: the caching allocator's bytes in use now, kept as the largest seen at this point of
  // the step (summary.json: where the device memory goes between the step's start and its peak).
  void note_device_memory(const char *point);
  // The step's figures (timers, with *_microstep forms for the standard ones, memory per tier,
  // GPU peaks); the per-step counters start over. lr and grad_norm are the caller's.
  StepRecord record(int64_t step, int64_t steps, double loss, double step_ms, int64_t grad_accum);

  // What summary.json names besides the measurements.
  struct Facts {
    std::string config_file, model;
    int64_t samples_per_step = 0;
    bool has_eval = false;
    const PluginSet *plugins = nullptr;
    const MemoryPlan *memory_plan = nullptr;
  };
  std::string summary_json(const RunSummary &s, int64_t timed_steps, const Facts &facts) const;

  // The run's phases outside the steps, in order (summary.json "process_seconds"): the time since
  // the previous mark, or since `at` seconds into the process, is `phase`'s.
  void mark(const std::string &phase, double at = -1);
  // "12.3 s (launch 2.1 s, model 5.0 s, ...)": the phases so far.
  std::string phases() const;

  double selected_fraction = 0;  // of the selector's columns (summary.json)
  double aux_loss = std::nan("");  // the step's load-balancing loss (a mixture of experts'), for record(); NaN: none
  std::vector<std::pair<std::string, double>> update_facts;  // bytes moved, ZenFlow counters (summary.json)
  // Per block, how often this rank gathered its parameters over the run (ZeRO-3, cpu_full; else empty).
  std::vector<std::pair<std::string, int64_t>> param_gathers;

 private:
  Runtime &runtime_;
  int64_t samples_ = 0, tokens_ = 0;  // this step
  int64_t tokens_total_ = 0;          // this rank, whole run
  DeviceMemory device_peak_;
  std::map<std::string, double> timer_totals_;
  std::vector<std::pair<std::string, uint64_t>> allocated_at_;  // in the order first noted
  std::vector<std::pair<std::string, double>> phases_;            // seconds, in order
  double last_mark_ = 0;                                           // process_seconds() of the last mark
};

// Rank 0 prints the model, the plugins and the ledger per tier.
void print_run_start(const Runtime &runtime, const std::string &model, const zf_layout &layout, torch::Dtype dtype,
                     const PluginSet &plugins);

// The whole fp32 master in layout order, gathered from every rank's shard `slice_numel` elements
// at a time: visit(lo, hi, values of [lo, hi)) on every rank, slice after slice (collective).
void for_each_master_slice(Communicator &comm, const torch::Tensor &master, uint64_t shard_begin, uint64_t shard_end,
                           uint64_t padded_numel, uint64_t slice_numel,
                           const std::function<void(uint64_t lo, uint64_t hi, const float *values)> &visit);

// Hash of the fp32 master parameters in segment order (padding excluded), over all shards,
// gathered `slice_numel` elements at a time: digest_string of the segments' values, numbered in
// that order.
// One term per value, keyed by its position in the stream (values[i] is at first + i), summed:
// any split of the stream into parts, hashed in any order, adds up to the same.
uint64_t digest_floats(const float *values, uint64_t n, uint64_t first);
// The digest of `count` values whose digest_floats add up to `sum`.
std::string digest_string(uint64_t sum, uint64_t count);

std::string param_digest(Communicator &comm, const zf_layout &layout, const torch::Tensor &master,
                         uint64_t shard_begin, uint64_t shard_end, uint64_t padded_numel,
                         uint64_t slice_numel = uint64_t(1) << 24);

}  // namespace zf
