// report.hpp: what a run shows and leaves behind. A line every run.log_every steps on stdout (loss,
// lr, step ms, throughput, memory; elapsed time and ETA where there is no bar), a progress bar with
// elapsed time, ETA and steps/s when stdout is a terminal, and in the output directory steps.jsonl,
// steps.csv (the same columns, step_columns.hpp), TensorBoard's event files (tensorboard.hpp),
// report.html (run_html.hpp) and summary.json. Only rank 0 writes.
#pragma once

#include "report/run_html.hpp"
#include "report/tensorboard.hpp"

#include <zf/zf_plugin.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
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
  double aux_loss = std::nan("");  // a mixture of experts' load-balancing loss (unscaled); NaN: none
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
  // progress: the bar, "on", "off" or "auto" (on a terminal, not under mpirun). breakdown: a line of
  // the step's timers under each step line. tensorboard: event files in OUTPUT_DIR/tensorboard/.
  RunReport(const std::filesystem::path &output_dir, bool writer, const std::string &progress, int64_t log_every,
            bool breakdown, int64_t resumed_step, bool tensorboard = false);
  ~RunReport();
  // Writes the step's rows and prints its line (the bar, if any, is cleared first).
  void step(const StepRecord &record);
  // Draws the bar for the last step, on the line below everything printed since step(): called
  // once the step's checkpoint and messages are out, so that none runs into the bar.
  void show_progress();
  // The run stops after `step` for `signal`: says so on stdout, at once (under mpirun stdout is a
  // pipe, whose buffer would otherwise come out after the run's summary).
  void stopped(int signal, int64_t step);
  // Writes report.html from every step so far (those of the run it resumed included): at each
  // checkpoint and (finish) at the end. One that cannot be written is a warning.
  void write_html();
  // Writes report.html and summary.json; "" or what could not be written (the run goes on to its export).
  std::string finish(const std::string &summary_json);
  const std::filesystem::path &output_dir() const { return output_dir_; }

 private:
  void append_line(std::FILE *&file, const std::string &line, const char *name);
  void note_closed_stdout();
  void write_csv(const StepRecord &record);
  void rewrite_csv(const std::vector<std::string> &old_columns);
  // "0:12 elapsed, ETA 1:05, 3.2 steps/s" after `record`, from this run's steps so far.
  std::string timing(const StepRecord &record) const;
  std::filesystem::path output_dir_;
  bool writer_, progress_;
  int64_t log_every_;
  bool breakdown_;
  std::FILE *jsonl_ = nullptr;
  std::FILE *csv_ = nullptr;
  std::vector<std::string> csv_columns_;  // steps.csv's header
  double started_s_ = 0;                  // process_seconds() when this run's steps began
  int64_t first_step_ = -1;               // this run's first step
  StepRecord last_;
  bool bar_shown_ = false;
  int64_t resumed_step_ = 0;     // the checkpoint's step this run continues the files of (0: none)
  bool stdout_closed_ = false;  // a write to stdout failed (a closed pipe): no more step lines
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::vector<RunPoint> points_;  // report.html's
};

}  // namespace zf
