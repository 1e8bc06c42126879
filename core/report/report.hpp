// report.hpp: what a run shows and leaves behind. One line per step on stdout (loss, step ms,
// throughput, memory), a progress bar when stdout is a terminal, and in the output directory
// steps.jsonl, steps.csv and summary.json. Only rank 0 writes.
#pragma once

#include <zf/zf_plugin.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace zf {

struct StepRecord {
  int64_t step = 0;
  int64_t steps = 0;
  double loss = 0;
  double step_ms = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double lr = 0;
  double grad_norm = -1;  // -1 when not computed (no clipping)
  double eval_loss = -1;  // -1 when not evaluated at this step
  std::string update;     // what the update did (ZenFlow: "select", "gpu", "cpu", "swap"), or empty
  std::vector<std::pair<std::string, double>> timers_ms;  // name -> ms in this step
  // run.rank_timers: every rank's step time and timers (name -> ms of rank 0, 1, ...), else empty
  std::vector<double> rank_step_ms;
  std::vector<std::pair<std::string, std::vector<double>>> rank_timers_ms;
  std::array<uint64_t, ZF_TIER_COUNT> memory{};           // current bytes per tier
  uint64_t device_allocated_peak = 0;  // GPU runs: the caching allocator's peaks in this step
  uint64_t device_reserved_peak = 0;
};

class RunReport {
 public:
  // resumed_step > 0: continue the files of the run that wrote that checkpoint, without the rows it
  // wrote after it (the resumed run computes those steps again); 0 starts them anew.
  // breakdown: a line of the step's timers under each step line.
  RunReport(const std::filesystem::path &output_dir, bool writer, bool progress, int64_t log_every, bool breakdown,
            int64_t resumed_step);
  ~RunReport();
  void step(const StepRecord &record);
  // Writes summary.json; "" or what could not be written (the run goes on to its export).
  std::string finish(const std::string &summary_json);
  const std::filesystem::path &output_dir() const { return output_dir_; }

 private:
  void draw_progress(const StepRecord &record);
  void append_line(std::FILE *&file, const std::string &line, const char *name);
  std::filesystem::path output_dir_;
  bool writer_, progress_;
  int64_t log_every_;
  bool breakdown_;
  std::FILE *jsonl_ = nullptr;
  std::FILE *csv_ = nullptr;
};

// The standard timer names, in report order.
const std::vector<std::string> &standard_timers();

}  // namespace zf
