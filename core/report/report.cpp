#include "report/report.hpp"

#include "comm/communicator.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/memory.hpp"
#include "runtime/timers.hpp"
#include "report/step_columns.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

namespace zf {

namespace {
constexpr size_t kMaxStepLogLineBytes = size_t(1) << 20;  // a row is a few kB, with rank timers of many ranks more

// The step log `name`, opened to append without following a link (runtime/files.hpp).
std::FILE *open_output(const Directory &out, const std::string &name) {
  int fd = out.open_append(name);
  std::FILE *file = fdopen(fd, "a");
  if (!file) close(fd);
  ZF_REQUIRE(file != nullptr, "cannot write %s: %s", out.path_of(name).c_str(), std::strerror(errno));
  return file;
}

// Keeps the header (a line that does not start with a step number) and the rows of steps up to
// `last_step` ("N,..." in CSV, {"step":N,...} in JSON lines). A last line without its newline (a
// write an older zfcore cut short) goes too.
void drop_rows_after(const Directory &out, const std::string &name, int64_t last_step) {
  if (out.kind_of(name) == "link") {  // not ours: its target is neither read nor written
    log_warn(format("%s is a symbolic link: the resumed run does not read where it points and starts a new %s in "
                    "its place", out.path_of(name).c_str(), name.c_str()));
    out.write_atomically(name, "");
    return;
  }
  // Line by line into the new file: a step log of any size is read in bounded memory, and a line
  // longer than any row zfcore writes (not one of its rows) is left out.
  PendingFile kept(out, name);
  uint64_t dropped_long = 0;
  const std::string why = for_each_line(out.path_of(name), kMaxStepLogLineBytes, [&](const TextLine &line) {
    if (line.too_long) return ++dropped_long, true;
    if (!line.complete) return true;  // a write cut short
    size_t digits = line.text.find_first_of("0123456789");
    bool row = digits != std::string::npos && (digits == 0 || line.text.rfind("{\"step\":", 0) == 0);
    if (!(row && std::strtoll(line.text.c_str() + digits, nullptr, 10) > last_step)) kept.write(line.text + "\n");
    return true;
  });
  ZF_REQUIRE(why.empty(), "%s: cannot read it to resume the step log: %s; move it away (the run writes a new one)",
             out.path_of(name).c_str(), why.c_str());
  if (dropped_long)
    log_warn(format("%s: %llu line(s) longer than %llu bytes are not rows zfcore wrote: left out of the resumed step "
                    "log", out.path_of(name).c_str(), (unsigned long long)dropped_long,
                    (unsigned long long)kMaxStepLogLineBytes));
  kept.commit();
}

}  // namespace

// Under mpirun a rank's stdout is a pseudo-terminal whatever the user's is: no bar by default.
RunReport::RunReport(const std::filesystem::path &output_dir, bool writer, const std::string &progress,
                     int64_t log_every, bool breakdown, int64_t resumed_step, bool tensorboard)
    : output_dir_(output_dir), writer_(writer),
      progress_(writer && (progress == "on" || (progress == "auto" && isatty(STDOUT_FILENO) && !launched_under_mpi()))),
      log_every_(log_every), breakdown_(breakdown) {
  if (!writer_) return;
  const Directory out = Directory::open(output_dir_.string(), true, "the output directory");
  bool continuing = resumed_step > 0 && !out.kind_of("steps.csv").empty();
  // An earlier run here that stopped before its first checkpoint: this one starts over, and says so.
  if (resumed_step == 0 && out.kind_of("steps.jsonl") == "file") {
    const std::vector<RunPoint> earlier = read_run_points(output_dir_ / "steps.jsonl");
    if (!earlier.empty())
      std::printf("zfcore: %s holds the steps of an earlier run (to step %lld) and no checkpoint this run resumes: "
                  "it starts over at step 1 and writes the step logs anew\n",
                  output_dir_.c_str(), (long long)earlier.back().step);
  }
  // A resumed run keeps the rows up to its step; a new one starts empty files. Either way the file
  // is replaced by a rename, never written through a link named like it.
  for (const char *name : {"steps.jsonl", "steps.csv"}) {
    if (!continuing) out.write_atomically(name, "");
    else if (!out.kind_of(name).empty()) drop_rows_after(out, name, resumed_step);
  }
  jsonl_ = open_output(out, "steps.jsonl");
  csv_ = open_output(out, "steps.csv");
  started_s_ = process_seconds();
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(output_dir_ / "tensorboard", resumed_step);
  if (!continuing) return;
  resumed_step_ = resumed_step;
  points_ = read_run_points(output_dir_ / "steps.jsonl");
  for_each_line(out.path_of("steps.csv"), kMaxStepLogLineBytes, [&](const TextLine &header) {
    if (!header.text.empty() && !header.too_long) csv_columns_ = csv_fields(header.text);
    return false;  // the first line only
  });
}

RunReport::~RunReport() {
  if (bar_shown_) std::printf("\n");  // an error's message goes below the bar
  std::fflush(stdout);
  if (jsonl_) std::fclose(jsonl_);
  if (csv_) std::fclose(csv_);
}

void RunReport::step(const StepRecord &r) {
  if (!writer_) return;
  JsonWriter json;
  json.begin_object().key("step").value(r.step).key("loss").value(r.loss).key("step_ms").value(r.step_ms);
  json.key("samples_per_s").value(r.samples_per_s).key("tokens_per_s").value(r.tokens_per_s);
  json.key("lr").value(r.lr);
  if (std::isfinite(r.aux_loss)) json.key("aux_loss").value(r.aux_loss);
  if (r.grad_norm >= 0) json.key("grad_norm").value(r.grad_norm);
  if (r.eval_loss >= 0) json.key("eval_loss").value(r.eval_loss);
  if (!r.update.empty()) json.key("update").value(r.update);
  json.key("timers_ms").begin_object();
  for (const auto &[name, ms] : r.timers_ms) json.key(name).value(ms);
  json.end_object().key("memory_bytes").begin_object();
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) json.key(tier_name(tier)).value(r.memory[tier]);
  json.end_object();
  if (!r.rank_step_ms.empty()) {
    json.key("rank_step_ms").begin_array();
    for (double ms : r.rank_step_ms) json.value(ms);
    json.end_array().key("rank_timers_ms").begin_object();
    for (const auto &[name, by_rank] : r.rank_timers_ms) {
      json.key(name).begin_array();
      for (double ms : by_rank) json.value(ms);
      json.end_array();
    }
    json.end_object();
  }
  if (r.device_reserved_peak) {
    json.key("gpu_peak_bytes").begin_object().key("allocated").value(r.device_allocated_peak);
    json.key("reserved").value(r.device_reserved_peak).end_object();
  }
  json.end_object();
  append_line(jsonl_, json.str() + "\n", "steps.jsonl");

  write_csv(r);
  if (tensorboard_) tensorboard_->write(r.step, tensorboard_scalars(r));
  if (first_step_ < 0) first_step_ = r.step;
  points_.push_back(run_point(r));
  last_ = r;

  if (bar_shown_) std::printf("\r\033[K");
  bar_shown_ = false;
  if (!stdout_closed_ && (r.step == 1 || r.step == r.steps || r.step % log_every_ == 0 || r.eval_loss >= 0)) {
    std::string memory;
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
      if (r.memory[tier]) memory += format(" | %s %s", tier_name(tier), format_bytes(r.memory[tier]).c_str());
    if (r.device_allocated_peak) memory += format(" | gpu peak %s", format_bytes(r.device_allocated_peak).c_str());
    std::string eval = r.eval_loss >= 0 ? format(" | eval loss %.4f", r.eval_loss) : "";
    if (std::isfinite(r.aux_loss)) eval += format(" | aux loss %.4f", r.aux_loss);
    std::string update = r.update.empty() ? "" : " | update " + r.update;
    // Without a bar (a file, a pipe, mpirun) the line says how far the run is.
    std::string timing_part = progress_ ? "" : " | " + timing(r);
    std::printf("step %*lld/%lld | loss %.4f%s | lr %.3g | %.1f ms | %.0f samples/s | %.0f tokens/s%s%s%s\n",
                int(std::to_string(r.steps).size()), (long long)r.step, (long long)r.steps, r.loss, eval.c_str(),
                r.lr, r.step_ms, r.samples_per_s, r.tokens_per_s, memory.c_str(), update.c_str(),
                timing_part.c_str());
    if (breakdown_) {  // the step's own timers (the _microstep ones repeat them per micro-step)
      std::string line;
      for (const auto &[name, ms] : r.timers_ms)
        if (name.find("_microstep") == std::string::npos) line += format(" | %s: %.1f", name.c_str(), ms);
      std::printf("  time (ms)%s\n", line.c_str());
    }
  }
  std::fflush(stdout);
  note_closed_stdout();
}

// A closed stdout (a pipe whose reader is gone) fails every write with EPIPE (SIGPIPE is ignored,
// cli/main.cpp): said once on stderr, and the step lines and the bar stop; training goes on.
void RunReport::note_closed_stdout() {
  if (stdout_closed_ || !std::ferror(stdout)) return;
  stdout_closed_ = true;
  log_warn(format("stdout is closed (%s): the step lines stop here; %s/steps.jsonl and steps.csv have every step, "
                  "and the run goes on", std::strerror(errno), output_dir_.c_str()));
}

void RunReport::show_progress() {
  if (!progress_ || first_step_ < 0 || stdout_closed_) return;
  const StepRecord &r = last_;
  const int width = 30;
  int filled = int(width * r.step / std::max<int64_t>(1, r.steps));
  std::string bar(size_t(filled), '=');
  if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
  std::printf("[%s] %lld/%lld loss %.4f | %s", bar.c_str(), (long long)r.step, (long long)r.steps, r.loss,
              timing(r).c_str());
  std::fflush(stdout);
  bar_shown_ = true;
}

void RunReport::stopped(int signal, int64_t step) {
  if (!writer_) return;
  if (bar_shown_) std::printf("\r\033[K");
  bar_shown_ = false;
  // Under mpirun the ranks see SIGTERM whatever the user sent mpirun (a Ctrl-C too): say so.
  const char *name = signal == SIGINT ? "SIGINT" : signal == SIGTERM ? "SIGTERM" : signal == SIGHUP ? "SIGHUP" : "a signal";
  std::printf("zfcore: stopped by %s (%d) after step %lld%s; resume with the same command\n", name, signal,
              (long long)step, launched_under_mpi() ? " (mpirun passes a Ctrl-C on to the ranks as SIGTERM)" : "");
  std::fflush(stdout);
}

namespace {
std::string duration(double seconds) {  // "1:05", "2:03:04"
  long long s = std::llround(std::max(0.0, seconds));
  return s >= 3600 ? format("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60) : format("%lld:%02lld", s / 60, s % 60);
}
}  // namespace

std::string RunReport::timing(const StepRecord &r) const {
  const double elapsed = process_seconds() - started_s_;
  const double rate = elapsed > 0 ? double(r.step - first_step_ + 1) / elapsed : 0;
  std::string eta = rate > 0 ? duration(double(r.steps - r.step) / rate) : "?";
  return format("%s elapsed, ETA %s, %.*f steps/s", duration(elapsed).c_str(), eta.c_str(), rate < 10 ? 2 : 1, rate);
}

// steps.csv takes every column of the record; a column it has not had yet (eval_loss at the first
// evaluation, a timer a plugin starts later) rewrites the file with that column added.
void RunReport::write_csv(const StepRecord &r) {
  if (!csv_) return;
  const StepColumns columns = step_columns(r);
  const std::vector<std::string> before = csv_columns_;
  if (merge_columns(csv_columns_, columns)) {
    struct stat file {};
    if (before.empty() && ::fstat(fileno(csv_), &file) == 0 && file.st_size == 0) {  // a new file: the header
      append_line(csv_, csv_line(csv_columns_) + "\n", "steps.csv");
    } else {
      rewrite_csv(before);
    }
  }
  append_line(csv_, csv_row(csv_columns_, columns) + "\n", "steps.csv");
}

void RunReport::rewrite_csv(const std::vector<std::string> &old_columns) {
  const std::filesystem::path path = output_dir_ / "steps.csv";
  std::fflush(csv_);
  std::string rewritten = csv_line(csv_columns_) + "\n";
  for_each_line(path.string(), kMaxStepLogLineBytes, [&](const TextLine &line) {
    if (line.number == 1 || !line.complete || line.too_long) return true;  // the old header; no row of ours
    std::vector<std::string> fields = csv_fields(line.text);
    StepColumns cells;
    for (size_t i = 0; i < fields.size() && i < old_columns.size(); ++i) cells.emplace_back(old_columns[i], fields[i]);
    rewritten += csv_row(csv_columns_, cells) + "\n";
    return true;
  });
  std::fclose(csv_);
  csv_ = nullptr;
  try {  // whole or not at all, and never through a link
    const Directory directory = Directory::open(output_dir_.string(), false);
    directory.write_atomically("steps.csv", rewritten);
    const int fd = directory.open_append("steps.csv");
    csv_ = ::fdopen(fd, "a");
    if (!csv_) ::close(fd);
  } catch (const Error &error) {
    log_warn(format("cannot rewrite %s with the new columns %s (%s): it ends at the step before; training goes on",
                    path.c_str(), csv_line(csv_columns_).c_str(), error.what()));
  }
}

// One whole line or nothing: a write cut short (a full disk) is cut off the file again, so that it
// ends at the step before. A step log that cannot be written is not worth the model: say so once,
// stop writing it, and let training, checkpoints and the export go on.
void RunReport::append_line(std::FILE *&file, const std::string &line, const char *name) {
  if (!file) return;
  struct stat before {};
  const bool sized = ::fstat(fileno(file), &before) == 0;  // every line is flushed: nothing is buffered
  std::fwrite(line.data(), 1, line.size(), file);
  std::fflush(file);
  if (!std::ferror(file)) return;
  const std::string why = errno ? std::strerror(errno) : "write error";
  if (sized && ::ftruncate(fileno(file), before.st_size) != 0)
    log_warn(format("cannot cut %s back to whole lines: %s", (output_dir_ / name).c_str(), std::strerror(errno)));
  std::fclose(file);
  file = nullptr;
  log_warn(format("cannot write %s (%s; disk full?): it ends at the step before; training goes on",
                  (output_dir_ / name).c_str(), why.c_str()));
}

void RunReport::write_html() {
  if (!writer_) return;
  try {  // whole or not at all, and never through a link
    const std::filesystem::path name = output_dir_.filename().empty() ? output_dir_.parent_path().filename()
                                                                       : output_dir_.filename();  // "runs/x/"
    Directory::open(output_dir_.string(), false)
        .write_atomically("report.html", run_html(name.string(), points_, resumed_step_));
  } catch (const Error &error) {
    log_warn(format("%s; the run goes on", error.what()));
  }
}

std::string RunReport::finish(const std::string &summary_json) {
  if (!writer_) return "";
  write_html();
  if (bar_shown_) std::printf("\n");  // the last bar stays, with the run's time
  bar_shown_ = false;
  std::fflush(stdout);
  // Through a temporary file and a rename: a full disk leaves the summary of an earlier run, not a cut one.
  try {
    write_file_atomically((output_dir_ / "summary.json").string(), summary_json + "\n");
    return "";
  } catch (const Error &e) {
    std::string failure = format("cannot write %s (%s)", (output_dir_ / "summary.json").c_str(), e.what());
    log_warn(failure + ": the export and the sample still follow");
    return failure;
  }
}

}  // namespace zf
