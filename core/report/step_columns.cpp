#include "report/step_columns.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

namespace {
std::string column_text(double value) { return std::isfinite(value) ? format("%.9g", value) : ""; }  // as JsonWriter
std::string column_text(uint64_t value) { return std::to_string(value); }
}  // namespace

StepColumns step_columns(const StepRecord &r) {
  StepColumns c;
  c.emplace_back("step", std::to_string(r.step));
  c.emplace_back("loss", column_text(r.loss));
  if (std::isfinite(r.aux_loss)) c.emplace_back("aux_loss", column_text(r.aux_loss));
  c.emplace_back("step_ms", column_text(r.step_ms));
  c.emplace_back("samples_per_s", column_text(r.samples_per_s));
  c.emplace_back("tokens_per_s", column_text(r.tokens_per_s));
  c.emplace_back("lr", column_text(r.lr));
  if (r.grad_norm >= 0) c.emplace_back("grad_norm", column_text(r.grad_norm));
  if (r.eval_loss >= 0) c.emplace_back("eval_loss", column_text(r.eval_loss));
  if (!r.update.empty()) c.emplace_back("update", r.update);
  // Timer columns carry a prefix: the step timer (the optimizer step) must not read as step_ms.
  for (const auto &[name, ms] : r.timers_ms) c.emplace_back("timer_" + name + "_ms", column_text(ms));
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
    c.emplace_back(format("mem_%s_bytes", tier_name(zf_tier(tier))), column_text(r.memory[tier]));
  for (size_t rank = 0; rank < r.rank_step_ms.size(); ++rank)
    c.emplace_back(format("rank%zu_step_ms", rank), column_text(r.rank_step_ms[rank]));
  for (const auto &[name, by_rank] : r.rank_timers_ms)
    for (size_t rank = 0; rank < by_rank.size(); ++rank)
      c.emplace_back(format("rank%zu_timer_%s_ms", rank, name.c_str()), column_text(by_rank[rank]));
  if (r.device_reserved_peak) {
    c.emplace_back("gpu_peak_allocated_bytes", column_text(r.device_allocated_peak));
    c.emplace_back("gpu_peak_reserved_bytes", column_text(r.device_reserved_peak));
  }
  return c;
}

std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepRecord &r) {
  std::vector<std::pair<std::string, double>> s;
  s.emplace_back("train/loss", r.loss);
  if (std::isfinite(r.aux_loss)) s.emplace_back("train/aux_loss", r.aux_loss);
  s.emplace_back("train/learning_rate", r.lr);
  if (r.grad_norm >= 0) s.emplace_back("train/grad_norm", r.grad_norm);
  if (r.eval_loss >= 0) s.emplace_back("eval/loss", r.eval_loss);
  s.emplace_back("perf/step_ms", r.step_ms);
  s.emplace_back("perf/samples_per_s", r.samples_per_s);
  s.emplace_back("perf/tokens_per_s", r.tokens_per_s);
  for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
    s.emplace_back(format("memory/%s_bytes", tier_name(zf_tier(tier))), double(r.memory[tier]));
  if (r.device_reserved_peak) {
    s.emplace_back("memory/gpu_peak_allocated_bytes", double(r.device_allocated_peak));
    s.emplace_back("memory/gpu_peak_reserved_bytes", double(r.device_reserved_peak));
  }
  // The timers under timer/; the optimizer step's ("step") as timer/optimizer_step_ms, so that no
  // tag but perf/step_ms (the whole step) ends in step_ms.
  for (const auto &[name, ms] : r.timers_ms)
    if (name.find("_microstep") == std::string::npos)
      s.emplace_back("timer/" + (name == "step" ? std::string("optimizer_step") : name) + "_ms", ms);
  return s;
}

bool merge_columns(std::vector<std::string> &columns, const StepColumns &record) {
  bool added = false;
  size_t after = 0;  // where the record's previous column stands in `columns`, + 1
  for (const auto &[name, value] : record) {
    auto at = std::find(columns.begin(), columns.end(), name);
    if (at == columns.end()) {
      at = columns.insert(columns.begin() + std::ptrdiff_t(std::min(after, columns.size())), name);
      added = true;
    }
    after = size_t(at - columns.begin()) + 1;
  }
  return added;
}

std::string csv_line(const std::vector<std::string> &fields) {
  std::string line;
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) line += ',';
    const std::string &f = fields[i];
    if (f.find_first_of(",\"\r\n") == std::string::npos) {
      line += f;
      continue;
    }
    line += '"';
    for (char ch : f) line += ch == '"' ? std::string("\"\"") : std::string(1, ch);
    line += '"';
  }
  return line;
}

std::vector<std::string> csv_fields(const std::string &line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  // A UTF-8 byte order mark, as a spreadsheet that saved the file writes it, is not part of the first name.
  const size_t start = line.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  for (size_t i = start; i < line.size(); ++i) {
    char ch = line[i];
    if (quoted && ch == '"' && i + 1 < line.size() && line[i + 1] == '"') {
      fields.back() += '"';
      ++i;
    } else if (ch == '"') {
      quoted = !quoted;
    } else if (ch == ',' && !quoted) {
      fields.emplace_back();
    } else {
      fields.back() += ch;
    }
  }
  return fields;
}

std::string csv_row(const std::vector<std::string> &columns, const StepColumns &record) {
  std::vector<std::string> fields(columns.size());
  for (const auto &[name, value] : record) {
    auto at = std::find(columns.begin(), columns.end(), name);
    if (at != columns.end()) fields[size_t(at - columns.begin())] = value;
  }
  return csv_line(fields);
}

}  // namespace zf
