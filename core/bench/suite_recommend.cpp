// suite_recommend.cpp: the recommendation from a suite's measurements. With --trials N a
// configuration has N rows; it is judged on its median step time (convergence: its median time to
// the target loss) and its largest memory, and only when every trial ran.
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
  double median_target_s = 0;         // convergence
  const RowResult *missed = nullptr;  // convergence: its first trial that did not reach the target
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
    std::vector<double> times, target_times;
    for (size_t i : c.rows) {
      const RowResult &r = rows[i];
      if (r.status != "ok" && !c.failed) c.failed = &r;
      if (r.status == "ok" && r.target_step < 0 && !c.missed) c.missed = &r;
      times.push_back(r.mean_step_ms);
      target_times.push_back(r.target_s);
      c.gpu_peak = std::max(c.gpu_peak, r.gpu_peak);
      c.host_rss = std::max(c.host_rss, r.host_rss);
    }
    c.median_ms = median(times);
    c.median_target_s = median(target_times);
  }
  return all;
}

// "error: ..." or "OOM (trial 2 of 3): ..." for a configuration with a trial that did not run.
std::string failure(const Configuration &c) {
  const RowResult *r = c.failed;
  std::string trial = c.rows.size() > 1 ? format(" (trial %d of %zu)", r->trial, c.rows.size()) : "";
  return r->status == "OOM" ? "OOM" + trial + (r->message.empty() ? "" : ": " + r->message)
                            : "error" + trial + ": " + r->message;
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
    if (c.failed) {
      reason[k] = failure(c);
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

double convergence_figures(std::vector<RowResult> &rows, double target_loss) {
  const bool first_ran = !rows.empty() && rows[0].status == "ok" && !rows[0].evals.empty();
  const double first_final = first_ran ? rows[0].evals.back().loss : 0;
  const double target = target_loss >= 0 ? target_loss : first_ran ? first_final : -1;
  for (RowResult &r : rows) {
    r.loss_ratio = 0, r.target_s = -1, r.target_step = -1;
    if (r.status != "ok" || r.evals.empty()) continue;
    if (first_ran) r.loss_ratio = r.evals.back().loss / first_final;
    for (const EvalPoint &point : r.evals)
      if (target >= 0 && point.loss <= target) {
        r.target_s = point.train_s;
        r.target_step = point.step;
        break;
      }
  }
  return target;
}

Recommendation recommend_convergence(const std::vector<RowResult> &rows, double target) {
  Recommendation rec;
  rec.reasons.resize(rows.size());
  std::vector<Configuration> all = configurations(rows);
  std::vector<std::string> reason(all.size());
  const Configuration *best = nullptr;
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (c.failed) reason[k] = failure(c);
    else if (target < 0) reason[k] = "no target loss: the first row did not run (give --target-loss)";
    else if (const RowResult *r = c.missed)
      reason[k] = format("did not reach %.4f%s (final held-out loss %.4f)", target,
                         c.rows.size() > 1 ? format(" in trial %d", r->trial).c_str() : "",
                         r->evals.empty() ? 0.0 : r->evals.back().loss);
    else if (!best || c.median_target_s < best->median_target_s) best = &c;
  }
  auto time_text = [](const Configuration &c) {
    return format(c.rows.size() > 1 ? "median %.1f s" : "%.1f s", c.median_target_s);
  };
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (&c == best) {
      rec.chosen = int(c.rows.front());
      reason[k] = format("first to held-out loss %.4f: %s of training (step %lld)", target, time_text(c).c_str(),
                         (long long)rows[c.rows.front()].target_step);
    } else if (reason[k].empty()) {
      reason[k] = format("later to %.4f: %s vs %.1f s (%s)", target, time_text(c).c_str(), best->median_target_s,
                         rows[best->rows.front()].row.name.c_str());
    }
    for (size_t i : c.rows) rec.reasons[i] = reason[k];
  }
  return rec;
}

}  // namespace zf
