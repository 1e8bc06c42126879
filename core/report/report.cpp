#include "report/report.hpp"

#include "runtime/error.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/memory.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

namespace zf {

const std::vector<std::string> &standard_timers() {
  static const std::vector<std::string> names = {
      "fwd", "bwd", "bwd_inner", "bwd_reduce", "step",
      "fwd_microstep", "bwd_microstep", "bwd_inner_microstep", "bwd_reduce_microstep", "step_microstep"};
  return names;
}

namespace {
std::FILE *open_output(const std::filesystem::path &path, bool append) {
  std::FILE *file = std::fopen(path.c_str(), append ? "a" : "w");
  ZF_REQUIRE(file != nullptr, "cannot write %s: %s", path.c_str(), std::strerror(errno));
  return file;
}

// Keeps the header (a line that does not start with a step number) and the rows of steps up to
// `last_step` ("N,..." in CSV, {"step":N,...} in JSON lines). A last line without its newline (a
// write an older zfcore cut short) goes too.
void drop_rows_after(const std::filesystem::path &path, int64_t last_step) {
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  text.erase(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
  std::istringstream in(text);
  std::string line, kept;
  while (std::getline(in, line)) {
    size_t digits = line.find_first_of("0123456789");
    bool row = digits != std::string::npos && (digits == 0 || line.rfind("{\"step\":", 0) == 0);
    if (row && std::strtoll(line.c_str() + digits, nullptr, 10) > last_step) continue;
    kept += line + "\n";
  }
  std::ofstream out(path, std::ios::trunc);
  out << kept;
  ZF_REQUIRE(out.good(), "cannot rewrite %s: %s", path.c_str(), std::strerror(errno));
}

double timer_value(const StepRecord &record, const std::string &name) {
  for (const auto &[timer, ms] : record.timers_ms)
    if (timer == name) return ms;
  return 0;
}
}  // namespace

RunReport::RunReport(const std::filesystem::path &output_dir, bool writer, bool progress, int64_t log_every,
                     bool breakdown, int64_t resumed_step)
    : output_dir_(output_dir), writer_(writer), progress_(progress && writer), log_every_(log_every),
      breakdown_(breakdown) {
  if (!writer_) return;
  std::error_code ec;
  std::filesystem::create_directories(output_dir_, ec);
  ZF_REQUIRE(!ec, "cannot create the output directory %s: %s", output_dir_.c_str(), ec.message().c_str());
  bool continuing = resumed_step > 0 && std::filesystem::exists(output_dir_ / "steps.csv");
  if (continuing)
    for (const char *name : {"steps.jsonl", "steps.csv"})
      if (std::filesystem::exists(output_dir_ / name)) drop_rows_after(output_dir_ / name, resumed_step);
  jsonl_ = open_output(output_dir_ / "steps.jsonl", continuing);
  csv_ = open_output(output_dir_ / "steps.csv", continuing);
  if (continuing) return;
  std::string header = "step,loss,step_ms,samples_per_s,tokens_per_s,lr";
  // Timer columns carry a prefix: the step timer (the optimizer step) must not read as step_ms.
  for (const std::string &name : standard_timers()) header += ",timer_" + name + "_ms";
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) header += format(",mem_%s_bytes", tier_name(tier));
  append_line(csv_, header + "\n", "steps.csv");
}

RunReport::~RunReport() {
  if (jsonl_) std::fclose(jsonl_);
  if (csv_) std::fclose(csv_);
}

void RunReport::step(const StepRecord &r) {
  if (!writer_) return;
  JsonWriter json;
  json.begin_object().key("step").value(r.step).key("loss").value(r.loss).key("step_ms").value(r.step_ms);
  json.key("samples_per_s").value(r.samples_per_s).key("tokens_per_s").value(r.tokens_per_s);
  json.key("lr").value(r.lr);
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

  std::string row = format("%lld,%.6f,%.3f,%.2f,%.2f,%.6g", (long long)r.step, r.loss, r.step_ms, r.samples_per_s,
                           r.tokens_per_s, r.lr);
  for (const std::string &name : standard_timers()) row += format(",%.3f", timer_value(r, name));
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) row += format(",%llu", (unsigned long long)r.memory[tier]);
  append_line(csv_, row + "\n", "steps.csv");

  if (progress_) std::printf("\r\033[K");
  if (r.step == 1 || r.step == r.steps || r.step % log_every_ == 0 || r.eval_loss >= 0) {
    std::string memory;
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
      if (r.memory[tier]) memory += format(" | %s %s", tier_name(tier), format_bytes(r.memory[tier]).c_str());
    if (r.device_allocated_peak) memory += format(" | gpu peak %s", format_bytes(r.device_allocated_peak).c_str());
    std::string eval = r.eval_loss >= 0 ? format(" | eval loss %.4f", r.eval_loss) : "";
    std::string update = r.update.empty() ? "" : " | update " + r.update;
    std::printf("step %*lld/%lld | loss %.4f%s | %.1f ms | %.0f samples/s | %.0f tokens/s%s%s\n",
                int(std::to_string(r.steps).size()), (long long)r.step, (long long)r.steps, r.loss, eval.c_str(),
                r.step_ms, r.samples_per_s, r.tokens_per_s, memory.c_str(), update.c_str());
    if (breakdown_) {  // the step's own timers (the _microstep ones repeat them per micro-step)
      std::string line;
      for (const auto &[name, ms] : r.timers_ms)
        if (name.find("_microstep") == std::string::npos) line += format(" | %s: %.1f", name.c_str(), ms);
      std::printf("  time (ms)%s\n", line.c_str());
    }
  }
  if (progress_) draw_progress(r);
  std::fflush(stdout);
}

void RunReport::draw_progress(const StepRecord &r) {
  const int width = 30;
  int filled = int(width * r.step / std::max<int64_t>(1, r.steps));
  std::string bar(size_t(filled), '=');
  if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
  std::printf("[%s] %lld/%lld loss %.4f", bar.c_str(), (long long)r.step, (long long)r.steps, r.loss);
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

std::string RunReport::finish(const std::string &summary_json) {
  if (!writer_) return "";
  if (progress_) std::printf("\r\033[K");
  std::fflush(stdout);
  // Through a temporary file and a rename: a full disk leaves the summary of an earlier run, not a cut one.
  const std::filesystem::path path = output_dir_ / "summary.json", temporary = output_dir_ / "summary.json.tmp";
  bool written = false;
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << summary_json << "\n";
    out.flush();
    written = out.good();
  }
  std::error_code ec;
  if (written) std::filesystem::rename(temporary, path, ec);
  if (written && !ec) return "";
  std::filesystem::remove(temporary, ec);
  std::string failure = format("cannot write %s (disk full?)", path.c_str());
  log_warn(failure + ": the export and the sample still follow");
  return failure;
}

}  // namespace zf
