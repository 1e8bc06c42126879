// suite_recommend.cpp: the recommendation from a suite's measurements. With --trials N a
// configuration has N rows; it is judged on its median step time and its largest memory, and only
// when every trial ran.
#include "bench/suite.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>

namespace zf {
namespace {

// One configuration: its trials' rows and what they add up to.
struct Configuration {
  std::vector<size_t> rows;
  const RowResult *failed = nullptr;  // its first trial that did not run
  double median_ms = 0;
  uint64_t gpu_peak = 0, host_rss = 0;  // the largest over its trials
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n == 0 ? 0 : n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::vector<Configuration> configurations(const std::vector<RowResult> &rows) {
  std::vector<Configuration> all;
  std::vector<std::string> names;
  for (size_t i = 0; i < rows.size(); ++i) {
    auto at = std::find(names.begin(), names.end(), rows[i].row.name);
    if (at == names.end()) {
      names.push_back(rows[i].row.name);
      all.emplace_back();
      at = names.end() - 1;
    }
    all[size_t(at - names.begin())].rows.push_back(i);
  }
  for (Configuration &c : all) {
    std::vector<double> times;
    for (size_t i : c.rows) {
      const RowResult &r = rows[i];
      if (r.status != "ok" && !c.failed) c.failed = &r;
      times.push_back(r.mean_step_ms);
      c.gpu_peak = std::max(c.gpu_peak, r.gpu_peak);
      c.host_rss = std::max(c.host_rss, r.host_rss);
    }
    c.median_ms = median(times);
  }
  return all;
}

// "100.0 ms", or "median 100.0 ms" over several trials.
std::string step_time(const Configuration &c) {
  return format(c.rows.size() > 1 ? "median %.1f ms" : "%.1f ms", c.median_ms);
}

}  // namespace

Recommendation recommend(const std::vector<RowResult> &rows, const MachineLimits &limits, int ranks) {
  Recommendation rec;
  rec.reasons.resize(rows.size());
  std::vector<Configuration> all = configurations(rows);
  std::vector<std::string> reason(all.size());
  const Configuration *best = nullptr;
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (const RowResult *r = c.failed) {
      std::string trial = c.rows.size() > 1 ? format(" (trial %d of %zu)", r->trial, c.rows.size()) : "";
      reason[k] = r->status == "OOM" ? "OOM" + trial + (r->message.empty() ? "" : ": " + r->message)
                                     : "error" + trial + ": " + r->message;
    } else if (limits.gpu_bytes && double(c.gpu_peak) > 0.9 * double(limits.gpu_bytes)) {
      reason[k] = "does not fit: GPU peak " + format_bytes(c.gpu_peak) + " > 90% of " + format_bytes(limits.gpu_bytes);
    } else if (limits.host_bytes && double(c.host_rss) * ranks > 0.9 * double(limits.host_bytes)) {
      reason[k] = format("does not fit: host RSS %s x %d ranks > 90%% of %s available", format_bytes(c.host_rss).c_str(),
                         ranks, format_bytes(limits.host_bytes).c_str());
    } else if (!best || c.median_ms < best->median_ms) {
      best = &c;
    }
  }
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (&c == best) {
      rec.chosen = int(c.rows.front());
      reason[k] = "fastest that fits: " + step_time(c) + " per step" +
                  (c.rows.size() > 1 ? format(" over %zu trials", c.rows.size()) : "");
    } else if (reason[k].empty()) {
      reason[k] = format("slower: %s vs %.1f ms (%s)", step_time(c).c_str(), best->median_ms,
                         rows[best->rows.front()].row.name.c_str());
    }
    for (size_t i : c.rows) rec.reasons[i] = reason[k];
  }
  return rec;
}

}  // namespace zf
