// suite_run.cpp: runs a suite's rows. Every row is `zfcore run BASE --set ...` in its own process
// (suite_launch.cpp), its figures read back from the run's own summary.json and steps.jsonl.
#include "bench/suite.hpp"

#include "bench/bench.hpp"
#include "bench/offload_floor.hpp"
#include "bench/suite_launch.hpp"

#include "memory/config_estimate.hpp"
#include "update/zenflow_estimate.hpp"
#include "config/config.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <variant>

namespace zf {
namespace {

namespace fs = std::filesystem;

using bench::Exit;
using bench::read_file;
using bench::row_command;
using bench::spawn;

// The text a generated convergence base trains on: every Debian and Ubuntu system has it.
const char *kConvergenceText = "/usr/share/common-licenses/GPL-3";

// The base config every row starts from: the user's TOML, or one written for a preset or a
// Hugging Face directory (synthetic tokens; convergence: real text with a held-out part), or a
// tiny GPT for CPU runs (convergence: the quickstart's).
std::string prepare_base(const SuiteOptions &o, const std::string &stem) {
  if (!o.model.empty() && fs::is_regular_file(o.model)) return o.model;
  const bool convergence = o.suite == "convergence";
  std::string model_lines;
  bool tiny = o.model.empty() && o.device == "cpu";
  const int64_t seq = o.seq_length ? o.seq_length : convergence ? 128 : tiny ? 64 : 512;
  if (tiny) {
    model_lines = format("type = \"gpt2\"\nhidden = %d\nlayers = %d\nheads = %d\nvocab = 257\nmax_seq = %lld\n",
                         convergence ? 128 : 64, convergence ? 4 : 2, convergence ? 4 : 2,
                         (long long)std::max<int64_t>(64, seq));
  } else if (!o.model.empty() && fs::is_directory(o.model)) {
    ZF_REQUIRE(fs::exists(fs::path(o.model) / "config.json"),
               "--model %s: a directory must be a Hugging Face checkpoint with config.json", o.model.c_str());
    model_lines = "init_from = \"" + fs::absolute(o.model).string() + "\"\n";
  } else {
    std::string preset = o.model.empty() ? "gpt2" : o.model;
    ZF_REQUIRE(preset.find('/') == std::string::npos && preset.find(".toml") == std::string::npos,
               "--model %s: no such file or directory (expected a preset name, a Hugging Face directory or a "
               "TOML config)", preset.c_str());
    model_lines = "preset = \"" + preset + "\"\n";
  }
  if (o.device == "cuda") model_lines += "dtype = \"bfloat16\"\n";
  if (o.suite == "scale") model_lines += "activation_checkpointing = true\n";  // as the large models train
  std::string text = format("# The base config of `zfcore bench %s`: every configuration adds its overrides to it.\n"
                            "[run]\nname = \"bench\"\ndevice = \"%s\"\n\n[model]\n%s\n",
                            o.suite.c_str(), o.device.c_str(), model_lines.c_str());
  if (convergence) {
    ZF_REQUIRE(fs::exists(kConvergenceText),
               "zfcore bench convergence trains on real text with a held-out part: without a TOML config it reads %s, "
               "which this machine does not have; give --model FILE.toml whose [data] has eval_path or eval_fraction",
               kConvergenceText);
    text += format("[data]\ntype = \"text\"\npath = \"%s\"\ntokenizer = \"byte\"\nseq_len = %lld\neval_fraction = 0.05\n"
                   "\n[train]\nsteps = 300\nmicro_batch = %d\nlr_schedule = \"cosine\"\nwarmup_steps = 20\n"
                   "clip_grad_norm = 1.0\n", kConvergenceText, (long long)seq, tiny ? 16 : 4);
  } else {
    text += format("[data]\ntype = \"synthetic\"\nseq_len = %lld\nsamples = 1024\n", (long long)seq);
    // Synthetic ids are drawn below the model's vocabulary.
    RunConfig shape_only = RunConfig::parse(text, "bench base");
    text += format("vocab = %lld\n", (long long)transformer_options(shape_only).shape.vocab);
    text += "\n[train]\nmicro_batch = 4\n";
  }
  text += format("\n[optimizer]\nplugin = \"%s\"\nlr = %s\n", o.device == "cuda" ? "gpu_adam" : "cpu_adam",
                 tiny ? (convergence ? "3e-3" : "1e-3") : "1e-4");
  std::string path = stem + ".base.toml";
  write_file_atomically(path, text);
  return path;
}

// Overrides of every row that belong to the configuration (also in recommended.toml).
std::vector<std::string> common_overrides(const SuiteOptions &o) {
  std::vector<std::string> common{"run.device=" + o.device};
  if (o.batch_size) common.push_back(format("train.micro_batch=%lld", (long long)o.batch_size));
  if (o.seq_length) common.push_back(format("data.seq_len=%lld", (long long)o.seq_length));
  if (o.grad_accum) common.push_back(format("train.grad_accum=%lld", (long long)o.grad_accum));
  common.insert(common.end(), o.extra.begin(), o.extra.end());
  return common;
}

// Overrides that make a run a measurement: its length, its output directory, nothing else done
// but (convergence) the held-out evaluations. A convergence row trains num_steps steps in all:
// its warm-up steps are training too, left out of the mean step time only. Other rows run one
// cool-down step after the timed ones, left out too: a step's time holds what the step before
// left of its update (an offloaded update overlaps the next forward), and the run's last step
// also waits for its own, so the timed steps would hold one update more than they are steps.
// A convergence row may train longer than the first (its steps factor): its learning-rate
// schedule then spans its own steps, as a run given more steps would.
std::vector<std::string> measurement_overrides(const SuiteOptions &o, const SuiteRow &row, bool first, int64_t warmup,
                                               const std::string &name, const std::string &dir) {
  const bool convergence = o.suite == "convergence";
  return {format("train.steps=%lld", (long long)(convergence ? convergence_steps(o, row, first) : warmup + o.num_steps + 1)),
          format("run.timing_warmup=%lld", (long long)warmup),
          "run.name=" + name, "run.output_dir=" + dir, "run.progress=off",
          "checkpoint.every=0", "checkpoint.final=false", "checkpoint.resume=never", "checkpoint.export_hf=",
          "sample.tokens=0", format("train.eval_every=%lld", (long long)(convergence ? o.eval_every : 0))};
}

bool mentions_oom(const std::string &log) {
  std::string lower = log;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return lower.find("out of memory") != std::string::npos || log.find("OOM") != std::string::npos ||
         lower.find("on signal 9") != std::string::npos;
}

// The first "error:" line of a log, without the logger's prefix.
std::string first_error(const std::string &log) {
  std::stringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    auto at = line.find("error: ");
    if (at != std::string::npos) return line.substr(at + 7);
  }
  return "";
}

uint64_t number(const nlohmann::json &object, const std::string &key) {
  auto it = object.find(key);
  return it != object.end() && it->is_number() ? it->get<uint64_t>() : 0;
}

// Reads the run's summary.json and steps.jsonl. The step time and the timers are means over the
// timed steps: `timed_count` steps after the `warmup` first (a cool-down step after them, if any,
// is left out: measurement_overrides). The bytes moved per step are the run's over its steps; with
// offload.ratio = "auto" (automatic: ratio_auto below), those of a step after the choice: step 1 updates the whole
// shard on the host, each later one its host share h (summary.json's offload_ratio), so a step's are
// the total times h / (1 + h (steps - 1)).
void read_measurements(RowResult &r, int64_t warmup, int64_t timed_count, bool automatic) {
  nlohmann::json summary = nlohmann::json::parse(read_file(fs::path(r.run_dir) / "summary.json"));
  const double tokens_per_step = summary.value("tokens_per_s", 0.0) * summary.value("mean_step_ms", 0.0) / 1e3;
  const nlohmann::json phases = summary.value("process_seconds", nlohmann::json::object());
  for (const char *phase : {"launch", "device_and_plugins", "model", "buffers", "optimizer", "stage", "resume"})
    r.startup_s += phases.value(phase, 0.0);
  const auto &peak = summary["peak_memory_bytes"];
  r.pinned_peak = number(peak, "pinned");
  r.host_ledger_peak = number(peak, "host");
  r.gpu_peak = summary.contains("gpu_memory_bytes") ? number(summary["gpu_memory_bytes"], "allocated_peak")
                                                   : number(peak, "device");
  for (const auto &[tag, bytes] : summary["memory_bytes"].items())
    if (tag.rfind("device.", 0) == 0 && bytes.is_number()) r.gpu_allocated_end += bytes.get<uint64_t>();
  const double run_steps = double(summary.value("steps", int64_t(0)) - summary.value("first_step", int64_t(1)) + 1);
  if (run_steps > 0) {
    const double host = summary.value("offload_ratio", 1.0);
    const double share = automatic && summary.contains("offload_ratio") ? host / (1 + host * (run_steps - 1))
                                                                          : 1 / run_steps;
    r.host_update_bytes_per_step = summary.value("host_update_bytes", 0.0) * share;
    r.down_bytes_per_step = summary.value("offload_bytes_down", 0.0) * share;
    r.up_bytes_per_step = summary.value("offload_bytes_up", 0.0) * share;
  }

  std::stringstream lines(read_file(fs::path(r.run_dir) / "steps.jsonl"));
  std::vector<nlohmann::json> steps;
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) steps.push_back(nlohmann::json::parse(line));
  const size_t skip = steps.size() > size_t(warmup) ? size_t(warmup) : 0;
  const size_t end = std::min(steps.size(), skip + size_t(timed_count));
  std::map<std::string, double> totals;
  double train_ms = 0, timed_ms = 0;  // the steps' own time: evaluations and start-up left out
  for (size_t i = 0; i < end; ++i) {
    r.step_times_ms.push_back(steps[i].value("step_ms", 0.0));
    train_ms += r.step_times_ms.back();
    if (steps[i].contains("eval_loss"))
      r.evals.push_back({steps[i].value("step", int64_t(0)), steps[i]["eval_loss"].get<double>(), train_ms / 1000});
    r.step_updates.push_back(steps[i].value("update", std::string()));
    if (i < skip) continue;
    timed_ms += r.step_times_ms.back();
    for (const auto &[name, ms] : steps[i]["timers_ms"].items()) totals[name] += ms.get<double>();
  }
  const double timed = double(end - skip);
  r.timed_steps = int64_t(end - skip);
  r.mean_step_ms = timed > 0 ? timed_ms / timed : 0.0;
  r.tokens_per_s = r.mean_step_ms > 0 ? tokens_per_step / (r.mean_step_ms / 1e3) : 0.0;
  auto mean = [&](const std::string &name) { return timed > 0 && totals.count(name) ? totals[name] / timed : 0.0; };
  const std::string micro = "_microstep";  // per micro-step copies of fwd, bwd, step: left out
  for (const auto &[name, total] : totals)
    if (name.size() <= micro.size() || name.compare(name.size() - micro.size(), micro.size(), micro) != 0)
      r.timers_ms.emplace_back(name, mean(name));
  r.fwd_ms = mean("fwd");
  r.bwd_ms = mean("bwd");
  // The GPU's own compute: a deferred update's blocks stall the forward (update_stall, on its stream).
  r.compute_ms = std::max(0.0, r.fwd_ms + r.bwd_ms - mean("update_stall"));
  r.step_ms = mean("step");
  r.selective_step_ms = totals.count("selective_optimizer_step") ? mean("selective_optimizer_step") : r.step_ms;
}

// Whether the row's config has offload.ratio = "auto". Such a row chooses its split at the start
// of step 2 from step 1's peak, then moves the device part's master and state onto the GPU: it warms
// up at least kAutoRatioWarmup steps, as the two steps from the choice are not its speed (Qwen2.5-32B
// on 4 H100: 13.6 s each, against 3.6 s steady), and its bytes per step are those after the choice.
bool ratio_auto(const std::string &base, const std::vector<std::string> &overrides) {
  try {
    const RunConfig config = RunConfig::load(base, overrides);
    for (const ConfigEntry &entry : config.plugin(ZF_KIND_OFFLOAD).entries)
      if (entry.key == "ratio" && std::holds_alternative<std::string>(entry.value))
        return std::get<std::string>(entry.value) == "auto";
  } catch (const std::exception &) {  // the run says what is wrong with its config
  }
  return false;
}

// With [zenflow], its state where the model computes is in the device bytes; topk "auto" fills
// run.device_memory_limit_gb or the GPU's memory (gpu_bytes: nvidia-smi's, read without a CUDA
// context here, which would hold GPU memory while the rows run).
void estimate_row(RowResult &r, const std::string &base, const std::vector<std::string> &overrides, int ranks,
                  uint64_t gpu_bytes) {
  try {
    RunConfig config = RunConfig::load(base, overrides);
    config.apply_global_batch(ranks);
    ConfigEstimate estimate = estimate_config(config, uint64_t(ranks));
    const PluginEstimate &e = estimate.own_stage(), &placed = estimate.own_offload();
    r.estimate = e.estimated ? e.total() : 0;
    if (!e.estimated) r.estimate_note = e.why;
    if (placed.estimated) {
      r.estimate_device = placed.tiers[ZF_TIER_DEVICE];
      r.estimate_pinned = placed.tiers[ZF_TIER_PINNED_HOST];
    }
    // Beside the measured GPU peak: the estimate's, with ZenFlow's state and the activations.
    if (config.has_table("zenflow") && r.estimate_device > 0) {
      const double limit_gb = config.real("run", "device_memory_limit_gb");
      const uint64_t capacity = limit_gb > 0 ? zenflow_capacity(config) : gpu_bytes;
      r.estimate_device +=
          estimate_zenflow(config, estimate, capacity, estimate_gpu_peak(estimate, r.estimate_device).bytes()).total();
    }
    if (r.estimate_device > 0) r.estimate_device = estimate_gpu_peak(estimate, r.estimate_device).bytes();
  } catch (const std::exception &error) {
    r.estimate_note = error_message(error);
  }
}

RowResult run_row(const SuiteOptions &o, const SuiteRow &row, int trial, const std::string &base, uint64_t gpu_bytes,
                  const std::vector<std::string> &common, const std::string &rows_dir, bool first) {
  RowResult r;
  r.row = row;
  r.trial = trial;
  // A new directory of this suite's own (run_suite made rows_dir): nothing of anyone's is replaced.
  r.run_dir = rows_dir + "/" + row.name + (o.trials > 1 ? format("-trial%d", trial) : "");
  ZF_REQUIRE(!fs::exists(fs::symlink_status(r.run_dir)), "internal: %s exists already (two rows of one name?)",
             r.run_dir.c_str());
  std::vector<std::string> overrides = common;
  overrides.insert(overrides.end(), row.overrides.begin(), row.overrides.end());
  estimate_row(r, base, overrides, o.ranks, gpu_bytes);
  const bool automatic = ratio_auto(base, overrides);
  r.warmup_steps = automatic ? std::max(o.warmup_steps, kAutoRatioWarmup) : o.warmup_steps;
  for (const std::string &item :
       measurement_overrides(o, row, first, r.warmup_steps, fs::path(r.run_dir).filename(), r.run_dir))
    overrides.push_back(item);

  std::string log_path = r.run_dir + ".log";
  Exit exit = spawn(row_command(o, row, base, overrides), log_path, o.timeout_s);
  r.host_rss = exit.max_rss;
  r.wall_s = exit.wall_s;
  r.log = read_file(log_path);
  bool has_summary = fs::exists(fs::path(r.run_dir) / "summary.json");
  if (exit.code == 0 && has_summary) {
    try {
      // A convergence row's steps after the warm-up are all timed; the others have a cool-down step.
      read_measurements(r, r.warmup_steps, o.suite == "convergence" ? INT64_MAX : o.num_steps, automatic);
      r.status = "ok";
    } catch (const std::exception &error) {
      r.message = "cannot read the run's results: " + std::string(error.what());
    }
    return r;
  }
  std::string error = first_error(r.log);
  if (exit.timed_out) {
    r.message = format("timed out after %.0f s (--timeout)", o.timeout_s);
  } else if (exit.signal == SIGKILL || mentions_oom(r.log)) {
    r.status = "OOM";
    r.message = !error.empty() ? error : exit.signal ? format("killed by signal %d", exit.signal) : "out of memory";
  } else {
    r.message = !error.empty() ? error
                : exit.signal ? format("killed by signal %d", exit.signal)
                              : format("exit code %d, no error line (see %s)", exit.code, log_path.c_str());
  }
  return r;
}

// 90% of these must hold the run: the GPU's memory (nvidia-smi) and the host's available memory
// or the cgroup's limit, whichever is smaller.
MachineLimits machine_limits(const std::string &device) {
  MachineLimits limits;
  if (device == "cuda") {
    if (std::FILE *pipe = popen("nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null", "r")) {
      unsigned long long mib = 0;
      if (std::fscanf(pipe, "%llu", &mib) == 1) limits.gpu_bytes = uint64_t(mib) << 20;
      pclose(pipe);
    }
  }
  std::stringstream meminfo(read_file("/proc/meminfo"));
  for (std::string line; std::getline(meminfo, line);)
    if (line.rfind("MemAvailable:", 0) == 0) limits.host_bytes = std::stoull(line.substr(13)) * 1024;
  std::string cgroup = read_file("/sys/fs/cgroup/memory.max");
  if (!cgroup.empty() && std::isdigit(static_cast<unsigned char>(cgroup[0])))
    limits.host_bytes = limits.host_bytes ? std::min<uint64_t>(limits.host_bytes, std::stoull(cgroup)) : std::stoull(cgroup);
  return limits;
}

// convergence: the run length and evaluation interval from the base config where the flags leave
// them out, and a held-out part to evaluate on.
void resolve_convergence(SuiteOptions &o, const RunConfig &base, const std::string &base_file) {
  if (o.num_steps == 0) o.num_steps = base.integer("train", "steps");
  if (o.eval_every == 0) o.eval_every = base.integer("train", "eval_every");
  if (o.eval_every == 0) o.eval_every = std::max<int64_t>(1, o.num_steps / 10);
  ZF_REQUIRE(!base.string("data", "eval_path").empty() || base.real("data", "eval_fraction") > 0,
             "zfcore bench convergence compares held-out losses, but %s has no held-out data: set data.eval_path "
             "(a file) or data.eval_fraction there, or add --set data.eval_fraction=0.05", base_file.c_str());
}

std::string timestamp() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d-%H%M%S", &local);
  return text;
}

}  // namespace

int run_suite(const SuiteOptions &options) {
  SuiteOptions o = options;
  // The suite's files are new names in --output-dir: a directory of its own for the rows (marked as
  // this process's), SUITE_TIME.{json,csv,html}; an earlier suite of the same second gets "-2" and on.
  const Directory output = Directory::open(o.output_dir, true, "--output-dir " + o.output_dir);
  SuiteReport report;
  std::string stem_name = o.suite + "_" + timestamp();
  for (int n = 2; !output.kind_of(stem_name).empty(); ++n) stem_name = o.suite + "_" + timestamp() + format("-%d", n);
  output.create_owned(stem_name, "bench " + process_token());
  report.stem = output.path_of(stem_name);
  std::string rows_dir = report.stem;
  report.base_config = prepare_base(o, report.stem);
  // A bad base or --set is the user's error, once.
  const RunConfig base = RunConfig::load(report.base_config, common_overrides(o));
  report.common = common_overrides(o);
  if (o.suite == "convergence") resolve_convergence(o, base, report.base_config);
  // Offloading on several ranks runs under ZeRO-2, as DeepSpeed's ZeRO-Offload and ZenFlow do
  // (they refuse stage 0): under zero0 every rank would update the whole model on its share of
  // the cores. A --set of the stage, or a base config's zero1-zero3, is kept.
  const std::vector<std::string> &stage = base.plugin(ZF_KIND_STAGE).candidates;
  const bool stage_set = std::any_of(o.extra.begin(), o.extra.end(),
                                     [](const std::string &item) { return item.rfind("stage.plugin=", 0) == 0; });
  if (o.ranks > 1 && o.suite != "stages" && o.suite != "scale" && !stage_set && stage == std::vector<std::string>{"zero0"}) {
    report.common.push_back("stage.plugin=zero2");
    std::printf("zfcore bench %s: the rows run under stage.plugin = \"zero2\" on %d ranks (set another stage with "
                "--set stage.plugin=...)\n", o.suite.c_str(), o.ranks);
  }
  report.limits = machine_limits(o.device);
  if (o.suite == "scale") {
    report.parameters = model_parameters(base);
    std::tie(report.peak_flops, report.peak_source) = gpu_peak_flops(o.device, o.peak_tflops);
  }
  if (bench::has_floor(o.suite)) {  // on the idle machine, before the rows
    report.rates = bench::measure_host_rate();
    std::printf("zfcore bench %s: host memory %.1f GB/s (Adam-shaped)\n", o.suite.c_str(),
                report.rates.host_bytes_per_s / 1e9);
  }

  bool terminal = isatty(STDERR_FILENO);
  // Rows by configuration, then trial; the trials are taken in turns (every configuration once,
  // then again), so that a machine that drifts during the suite moves every configuration alike.
  std::vector<RowResult> rows(o.rows.size() * size_t(o.trials));
  size_t total = rows.size(), done = 0;
  for (int trial = 1; trial <= o.trials; ++trial)
    for (size_t k = 0; k < o.rows.size(); ++k) {
      const SuiteRow &row = o.rows[k];
      if (terminal)
        std::fprintf(stderr, "[%zu/%zu] %s%s ...", ++done, total, row.name.c_str(),
                     o.trials > 1 ? format(" (trial %d of %d)", trial, o.trials).c_str() : "");
      RowResult &r = rows[k * size_t(o.trials) + size_t(trial - 1)];
      r = run_row(o, row, trial, report.base_config, report.limits.gpu_bytes, report.common, rows_dir, k == 0);
      std::string figure = format(" %.1f ms/step", r.mean_step_ms);
      if (!r.evals.empty()) figure += format(", held-out loss %.4f", r.evals.back().loss);
      if (terminal)
        std::fprintf(stderr, " %s%s (%.0f s)\n", r.status.c_str(),
                     r.status == "ok" ? figure.c_str() : (": " + r.message).c_str(), r.wall_s);
    }
  if (bench::has_floor(o.suite) && o.device == "cuda") {
    bench::measure_pcie(report.rates);
    std::printf("zfcore bench %s: PCIe %.1f GB/s down, %.1f GB/s up (pinned copies, after the rows)\n",
                o.suite.c_str(), report.rates.down_bytes_per_s / 1e9, report.rates.up_bytes_per_s / 1e9);
  }
  bench::set_floors(rows, o, report.rates);
  if (o.suite == "scale") scale_figures(rows, report, o.ranks);
  Recommendation recommendation;
  if (o.suite == "convergence") {
    int reference_trials = 0;
    for (const RowResult &r : rows) reference_trials += r.row.name == rows[0].row.name && r.status == "ok";
    // One trial of the reference measures no spread: --target-tolerance states one (the note says so).
    const bool one = o.target_loss < 0 && reference_trials == 1;
    report.target_tolerance = o.target_tolerance > 0 ? o.target_tolerance : 0.0;
    report.target_loss = convergence_figures(rows, o.target_loss, report.target_tolerance);
    report.target_from = o.target_loss >= 0          ? "--target-loss"
                         : report.target_loss >= 0 ? (reference_trials > 1 ? "the highest final held-out loss over the trials of "
                                                                           : "the final held-out loss of ") +
                                                         rows[0].row.name
                                                   : "none: the first row did not run";
    if (report.target_tolerance > 0)
      report.target_from += format(", reached within %.1f%%%s", 100 * report.target_tolerance,
                                   one ? " (--target-tolerance: one trial measures no spread)" : "");
    recommendation = recommend_convergence(rows, report.target_loss);
  } else {
    recommendation = recommend(rows, report.limits, o.ranks);
  }
  write_suite_outputs(o, report, rows, recommendation);
  print_suite_table(o, report, rows, recommendation);
  double wall = 0, startup = 0;
  for (const RowResult &r : rows) {
    wall += r.wall_s;
    startup += r.startup_s;
  }
  std::printf("%zu run(s) in %.0f s, of which %.0f s before their first steps\n", rows.size(), wall, startup);
  std::printf("wrote %s.html, %s.json, %s.csv%s (logs and runs in %s/)\n", report.stem.c_str(), report.stem.c_str(),
              report.stem.c_str(),
              recommendation.chosen >= 0 ? (", " + recommended_path(o)).c_str() : "",
              rows_dir.c_str());
  return recommendation.chosen >= 0 || std::any_of(rows.begin(), rows.end(), [](const RowResult &r) {
           return r.status == "ok";
         }) ? 0 : 1;
}

int bench_suite(const std::string &suite, const std::vector<std::string> &args) {
  return run_suite(parse_suite_options(suite, args));
}

}  // namespace zf
