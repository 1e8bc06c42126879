// suite.hpp: `zfcore bench stages | offload | zenflow | binding | convergence | scale`: one base config, a
// list of configurations (rows) that each add `--set table.key=value` overrides to it, every row
// trained in its own process, its own summary.json and steps.jsonl read back, and a recommendation
// from the measurements: the fastest step that fits, or (convergence) the first to a held-out loss.
// A new strategy is a new row in suite_options.cpp's tables (or a --rows spec), not new code.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class RunConfig;

// One configuration of a suite.
struct SuiteRow {
  std::string name;                    // "zero2", "cpu_optimizer", "topk0.1-u4-overlap-pin", ...
  std::vector<std::string> overrides;  // "table.key=value", applied to the base config
  bool bind_at_launch = false;         // each rank started under numactl/taskset on its share of the cores
  std::vector<std::pair<std::string, std::string>> labels;  // extra table columns (zenflow: topk_ratio, ...)
  int simplicity = 0;  // lower is simpler (zero0 < zero1, none < cpu_optimizer): the last tie-break
  double steps_factor = 0;  // convergence: trains this many times --num-steps (0: --steps-factor's, 1 for the first row)
};

// The least warm-up of a row with offload.ratio = "auto": the step whose peak the split is chosen
// from, then the two steps that move the device part onto the GPU (suite_run.cpp).
constexpr int64_t kAutoRatioWarmup = 3;

struct SuiteOptions {
  std::string suite;                   // stages | offload | zenflow | binding | convergence | scale
  std::string model;                   // preset name, Hugging Face directory or TOML file ("" = built-in)
  int64_t batch_size = 0;              // 0: the base config's (train.micro_batch)
  int64_t seq_length = 0;              // 0: the base config's (data.seq_len)
  int64_t num_steps = 20;              // convergence: 0 until resolved from the base config's train.steps
  int64_t warmup_steps = 5;
  int64_t grad_accum = 0;              // 0: the base config's
  std::string output_dir = "results";
  int ranks = 1;                       // --gpus: processes under mpirun (also on CPU)
  std::string device;                  // cpu | cuda
  double timeout_s = 1800;             // per configuration
  int trials = 1;                      // --trials: each configuration runs this many times, a row per trial
  std::vector<std::string> extra;      // --set overrides for every row
  int64_t eval_every = 0;              // convergence: train.eval_every (0: the base config's, else num_steps / 10)
  double target_loss = -1;             // convergence: -1: the first row's final held-out loss
  // convergence: a row reaches the target within this fraction of it (one trial of the first row
  // measures no spread; with trials the highest of their finals is the spread)
  double target_tolerance = 0;
  double steps_factor = 1;             // convergence: the rows after the first train this many times num_steps
  double peak_tflops = 0;              // scale: the GPU's dense bf16 peak per GPU (0: from its name)
  std::vector<SuiteRow> rows;
};

// Parses `zfcore bench SUITE ...` and builds the rows; throws UsageError on a bad flag.
SuiteOptions parse_suite_options(const std::string &suite, const std::vector<std::string> &args);

// One evaluation of a run: the held-out loss after `step`, and the training time until then (the
// sum of the steps' step_ms: evaluations and start-up left out).
struct EvalPoint {
  int64_t step = 0;
  double loss = 0;
  double train_s = 0;
};

// What one configuration measured.
struct RowResult {
  SuiteRow row;
  int trial = 1;                 // 1..trials
  std::string status = "error";  // ok | OOM | error
  std::string message;           // first error line, or empty
  std::string log;               // the run's stdout and stderr
  std::string run_dir;           // the run's output directory
  double mean_step_ms = 0, fwd_ms = 0, bwd_ms = 0, step_ms = 0, selective_step_ms = 0;
  double tokens_per_s = 0;
  int64_t timed_steps = 0;
  // Steps left out before the timed ones: --warmup-steps, or more where the row's first steps choose
  // and then move its update (warmup_steps_of in suite_run.cpp)
  int64_t warmup_steps = 0;
  std::vector<std::pair<std::string, double>> timers_ms;  // every timer's mean over the timed steps
  std::vector<double> step_times_ms;  // every step, warm-up included
  std::vector<std::string> step_updates;  // every step's `update` events ("gpu,swap,cpu"; "" for none)
  uint64_t gpu_peak = 0;              // allocator's peak (GPU runs), else the ledger's device peak
  uint64_t gpu_allocated_end = 0;     // ledger's device bytes at the end
  uint64_t host_rss = 0;              // peak RSS of the largest process of the run (rank)
  uint64_t pinned_peak = 0;           // ledger's pinned peak
  uint64_t host_ledger_peak = 0;
  double wall_s = 0;                  // the run's processes, from start to exit
  double startup_s = 0;               // of which until step 1 (rank 0's summary.json process_seconds)
  uint64_t estimate = 0;              // `zfcore estimate`'s bytes per rank for this stage (0: none)
  uint64_t estimate_device = 0, estimate_pinned = 0;  // the estimate's GPU peak (buffers and activations), pinned host
  std::string estimate_note;          // why there is none
  std::vector<EvalPoint> evals;       // every evaluation the run logged (train.eval_every)
  // per step of the run: bytes the CPU optimizer streamed through host memory, gradient bytes
  // copied down, parameter bytes copied up (summary.json), and the floor they set (offload suite)
  double host_update_bytes_per_step = 0, down_bytes_per_step = 0, up_bytes_per_step = 0;
  double floor_ms = 0;  // offload_floor.hpp; 0: none (offload and scale suites)
  double step_over_floor() const { return floor_ms > 0 ? mean_step_ms / floor_ms : 0; }
  // scale (scale_figures; compute_ms is read with the timers): model FLOPs utilisation (6 x
  // parameters x tokens over the GPUs' peak), the GPU's compute per step (fwd + bwd, their
  // collectives inside, less the forward's stalls for a deferred update: update_stall) and its
  // share of the step
  double mfu = 0, compute_ms = 0, practicality = 0;
  // convergence (convergence_figures): against the first row and the target loss
  double loss_ratio = 0;              // final held-out loss / the first row's (0: unknown)
  double target_s = -1;               // training seconds until the held-out loss first reached the target; -1: never
  int64_t target_step = -1;           // the step of that evaluation; -1: never
  double best_over_target = 0;        // the lowest held-out loss over the target (how close a row that misses came)
  // steps and training time to the target over the first row's (the median of its trials'); 0: unknown
  double steps_over_first = 0, time_over_first = 0;
};

// The rates an offloaded step's floor is measured against (offload_floor.hpp; 0: not measured).
struct LinkRates {
  double host_bytes_per_s = 0;  // host memory, Adam-shaped (28 bytes per element as an fp32 Adam streams them)
  double down_bytes_per_s = 0;  // GPU -> pinned host
  double up_bytes_per_s = 0;    // pinned host -> GPU
};

// Memory the recommendation compares against (0: unknown, not checked).
struct MachineLimits {
  uint64_t gpu_bytes = 0;
  uint64_t host_bytes = 0;
};

struct Recommendation {
  int chosen = -1;                   // index into the rows (the chosen configuration's first trial), -1: none fits
  std::vector<std::string> reasons;  // per row: why (not) chosen; the same for every trial of a configuration
  // per row: chosen | within noise | slower | does not fit | OOM | error
  // (convergence: chosen | later | did not reach | no target | OOM | error)
  std::vector<std::string> verdicts;
  // Whether rows[i] is a trial of the chosen configuration.
  bool picks(const std::vector<RowResult> &rows, size_t i) const {
    return chosen >= 0 && rows[i].row.name == rows[size_t(chosen)].row.name;
  }
};

// Among the configurations whose trials all ran ok and whose largest memory fits within 90% of the
// limits: the fastest (median step time of 3 or more trials, mean of 2), or of those within noise
// of it (centers closer than their trials' spreads together) the one with the least memory, then
// the simplest. One reason per row.
Recommendation recommend(const std::vector<RowResult> &rows, const MachineLimits &limits, int ranks);
// One line on how the verdict treats noise with this many trials (the table's and the report's).
std::string noise_note(int trials);
// The convergence suite's: its rows are judged on the center of their times to the target.
std::string convergence_noise_note(int trials);

// convergence: the target (target_loss when >= 0, else the first row's final held-out loss; -1
// when there is none), and each row's loss ratio to the first row and time and steps to the target:
// the first evaluation at or below target x (1 + tolerance).
double convergence_figures(std::vector<RowResult> &rows, double target_loss, double tolerance = 0);
// The steps a row trains: num_steps times its factor (the first row: 1 unless its spec gives one).
int64_t convergence_steps(const SuiteOptions &options, const SuiteRow &row, bool first);
// convergence: the configuration that reaches the target first in training time (median over its
// trials, every trial must reach it); OOM and error rows are out.
Recommendation recommend_convergence(const std::vector<RowResult> &rows, double target);

// The whole suite: runs every row, writes OUTPUT_DIR/<suite>_<time>.{json,csv,html} and
// recommended-<suite>.toml, prints the table. Exit code 0 when at least one row ran.
int run_suite(const SuiteOptions &options);

// suite_report.cpp
struct SuiteReport {
  std::string stem;        // OUTPUT_DIR/<suite>_<time>
  std::string base_config; // the TOML every row starts from
  std::vector<std::string> common;  // overrides of every row that belong in recommended.toml
  MachineLimits limits;
  LinkRates rates;          // offload, scale: the host's before the rows, PCIe after them
  double target_loss = -1;  // convergence: the target the rows were judged on (-1: none)
  double target_tolerance = 0;  // convergence: reached within this fraction of it
  std::string target_from;  // convergence: where it came from
  // scale: the model's parameters, the peak the MFU is over (per GPU, FLOP/s) and where it came from
  double parameters = 0, peak_flops = 0;
  std::string peak_source;
};

// suite_scale.cpp: the scale suite's figures, table, JSON fields and CSV columns.
// The dense bf16 peak of the GPUs of this machine (nvidia-smi's name: H100 SXM and H200 989 TFLOP/s,
// H100 PCIe 756, A100 312), `tflops` when > 0; 0 and why on a CPU run or an unknown GPU.
std::pair<double, std::string> gpu_peak_flops(const std::string &device, double tflops);
// Trainable parameters of the config's model (a tied head counted once).
double model_parameters(const RunConfig &config);
// MFU, compute ms and practicality of each ok row.
void scale_figures(std::vector<RowResult> &rows, const SuiteReport &report, int ranks);
// A console table: columns padded to their widest cell, separated by two spaces.
void print_columns(const std::vector<std::vector<std::string>> &table);
void print_scale_table(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows);
std::string scale_csv_header();
std::string scale_csv_fields(const RowResult &r);
void write_suite_outputs(const SuiteOptions &options, const SuiteReport &report, const std::vector<RowResult> &rows,
                         const Recommendation &recommendation);
// suite_html.cpp: the self-contained HTML report (table, SVG charts), written beside the JSON.
std::string suite_html(const SuiteOptions &options, const SuiteReport &report, const std::vector<RowResult> &rows,
                       const Recommendation &recommendation);
// convergence's cells: "12.3 s (1.25x)" (over the first row's) or "not reached (closest 1.0123x)"
// (the lowest held-out loss over the target); "330 (1.10x)" or "-".
std::string time_to_target_text(const RowResult &r);
std::string steps_to_target_text(const RowResult &r);
void print_suite_table(const SuiteOptions &options, const SuiteReport &report, const std::vector<RowResult> &rows,
                       const Recommendation &recommendation);
// "" when every row warmed up --warmup-steps; else which rows warmed up longer and why (the tables' first line).
std::string warmup_note(const SuiteOptions &options, const std::vector<RowResult> &rows);
// OUTPUT_DIR/recommended-<suite>.toml: each suite its own, so one does not overwrite another's.
std::string recommended_path(const SuiteOptions &options);
// The base config with the chosen overrides written in (TOML, valid for `zfcore run`).
std::string recommended_toml(const std::string &base_file, const std::vector<std::string> &overrides,
                             const std::string &header);

}  // namespace zf
