// suite_recommend.cpp: the recommendation from a suite's measurements. With --trials N a
// configuration has N rows; it is judged on the center of its trials' step times (the median from
// 3 trials, the mean of 2) and its largest memory, and only when every trial ran. Step times move
// from run to run: configurations whose centers differ by less than their trials' spreads together
// are within noise of each other, and among those within noise of the fastest the one with the
// least memory wins, then the simplest. One trial measures no noise, and the verdict says so.
// The convergence suite judges a configuration on the center of its trials' times to the target
// loss instead: the first to reach it wins, unless others reach it at the same step in about the
// same time (within 5%, or the trials' spreads): then the first listed of those wins.
#include "bench/suite.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cmath>

namespace zf {
namespace {

// One configuration: its trials' rows and what they add up to.
struct Configuration {
  std::vector<size_t> rows;
  const RowResult *failed = nullptr;  // its first trial that did not run
  double center_ms = 0, min_ms = 0, max_ms = 0;
  double median_target_s = 0;         // convergence: the center of its trials' times to the target
  double min_target_s = 0, max_target_s = 0, center_target_step = 0;
  const RowResult *missed = nullptr;  // convergence: its first trial that did not reach the target
  uint64_t gpu_peak = 0, host_rss = 0, host_peak = 0, pinned_peak = 0;  // the largest over its trials
  std::string reason;                                  // why it cannot be chosen ("" if it can)
  std::string name(const std::vector<RowResult> &all) const { return all[rows.front()].row.name; }
  double spread() const { return max_ms - min_ms; }
};

// The median of 3 or more values, the mean of 2.
double center(std::vector<double> values) {
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
    std::vector<double> times, target_times, target_steps;
    for (size_t i : c.rows) {
      const RowResult &r = rows[i];
      if (r.status != "ok" && !c.failed) c.failed = &r;
      if (r.status == "ok" && r.target_step < 0 && !c.missed) c.missed = &r;
      times.push_back(r.mean_step_ms);
      target_times.push_back(r.target_s);
      target_steps.push_back(double(r.target_step));
      c.gpu_peak = std::max(c.gpu_peak, r.gpu_peak);
      c.host_rss = std::max(c.host_rss, r.host_rss);
      c.host_peak = std::max(c.host_peak, r.host_ledger_peak);
      c.pinned_peak = std::max(c.pinned_peak, r.pinned_peak);
    }
    c.center_ms = center(times);
    c.min_ms = *std::min_element(times.begin(), times.end());
    c.max_ms = *std::max_element(times.begin(), times.end());
    c.median_target_s = center(target_times);
    c.min_target_s = *std::min_element(target_times.begin(), target_times.end());
    c.max_target_s = *std::max_element(target_times.begin(), target_times.end());
    c.center_target_step = center(target_steps);
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

// "100.0 ms", "mean 100.0 ms (98.0-102.0 over 2 trials)", "median 100.0 ms (97.0-104.0 over 3 trials)".
std::string step_time(const Configuration &c) {
  size_t n = c.rows.size();
  if (n == 1) return format("%.1f ms", c.center_ms);
  return format("%s %.1f ms (%.1f-%.1f over %zu trials)", n == 2 ? "mean" : "median", c.center_ms, c.min_ms, c.max_ms, n);
}

// Within noise: the centers differ by less than the two spreads together (which holds whenever
// the trials' ranges overlap). One trial has no spread: nothing is within noise.
bool within_noise(const Configuration &a, const Configuration &b) {
  if (a.rows.size() < 2 || b.rows.size() < 2) return false;
  return std::abs(a.center_ms - b.center_ms) <= a.spread() + b.spread();
}

// Memory that decides between configurations within noise: the GPU's peak, or on CPU runs (no
// device memory) the ledger's host and pinned tier peaks together, which are one RAM there (an
// offload to "host" memory moves nothing off the machine); equal within 5%.
bool less_memory(const Configuration &a, const Configuration &b) {
  const bool gpu = a.gpu_peak || b.gpu_peak;
  auto bytes = [gpu](const Configuration &c) { return double(gpu ? c.gpu_peak : c.host_peak + c.pinned_peak); };
  return bytes(a) < 0.95 * bytes(b);
}

// Lower is simpler: the suite's order of its strategies (zero0 before zero1, none before cpu_optimizer).
int simplicity(const std::vector<RowResult> &rows, const Configuration &c) { return rows[c.rows.front()].row.simplicity; }

}  // namespace

Recommendation recommend(const std::vector<RowResult> &rows, const MachineLimits &limits, int ranks) {
  Recommendation rec;
  rec.reasons.resize(rows.size());
  rec.verdicts.resize(rows.size());
  std::vector<Configuration> all = configurations(rows);
  const Configuration *fastest = nullptr;
  for (Configuration &c : all) {
    if (c.failed) {
      c.reason = failure(c);
    } else if (limits.gpu_bytes && double(c.gpu_peak) > 0.9 * double(limits.gpu_bytes)) {
      c.reason = "does not fit: GPU peak " + format_bytes(c.gpu_peak) + " > 90% of " + format_bytes(limits.gpu_bytes);
    } else if (limits.host_bytes && double(c.host_rss) * ranks > 0.9 * double(limits.host_bytes)) {
      c.reason = format("does not fit: host RSS %s x %d ranks > 90%% of %s available", format_bytes(c.host_rss).c_str(),
                        ranks, format_bytes(limits.host_bytes).c_str());
    } else if (!fastest || c.center_ms < fastest->center_ms) {
      fastest = &c;
    }
  }
  // Among those within noise of the fastest: the least memory, then the simplest, then the fastest.
  auto better = [&](const Configuration &a, const Configuration &b) {
    if (less_memory(a, b) || less_memory(b, a)) return less_memory(a, b);
    if (simplicity(rows, a) != simplicity(rows, b)) return simplicity(rows, a) < simplicity(rows, b);
    return a.center_ms < b.center_ms;
  };
  const Configuration *best = fastest;
  for (const Configuration &c : all)
    if (c.reason.empty() && &c != best && within_noise(c, *fastest) && better(c, *best)) best = &c;
  size_t tied = 0, fitting = 0;  // others within noise of the fastest; others that ran and fit
  for (const Configuration &c : all) {
    fitting += c.reason.empty() && &c != best;
    tied += c.reason.empty() && &c != best && within_noise(c, *fastest);
  }

  for (const Configuration &c : all) {
    std::string reason = c.reason, verdict = c.failed ? c.failed->status : "does not fit";
    if (&c == best) {
      rec.chosen = int(c.rows.front());
      verdict = "chosen";
      if (c.rows.size() == 1)
        reason = "fastest that fits: " + step_time(c) + " per step (one trial: no noise estimate; --trials 3 gives one)";
      else if (tied == 0)
        reason = "fastest that fits: " + step_time(c) + " per step" +
                 (fitting ? ", the others slower beyond their trials' spread" : "");
      else
        reason = format("chosen among the %zu within noise of the fastest (by memory, then simplicity): %s per step",
                        tied + 1, step_time(c).c_str());
    } else if (reason.empty() && within_noise(c, *fastest)) {
      verdict = "within noise";
      const std::string chosen = best->name(rows);
      const std::string why = less_memory(*best, c)                          ? chosen + " has less memory"
                              : simplicity(rows, *best) < simplicity(rows, c) ? "as little memory, " + chosen + " is simpler"
                                                                              : "as little memory, " + chosen + " is faster";
      reason = format("within noise: %s vs %.1f ms (%s); %s", step_time(c).c_str(), best->center_ms, chosen.c_str(),
                      why.c_str());
    } else if (reason.empty()) {
      verdict = "slower";
      reason = format("slower: %s vs %.1f ms (%s)%s", step_time(c).c_str(), fastest->center_ms,
                      fastest->name(rows).c_str(), c.rows.size() > 1 ? ", beyond the trials' spread" : "");
    }
    for (size_t i : c.rows) {
      rec.reasons[i] = reason;
      rec.verdicts[i] = verdict;
    }
  }
  return rec;
}

std::string noise_note(int trials) {
  if (trials == 1)
    return "one trial per configuration: the verdict has no noise estimate (--trials 3 measures one)";
  return format("%d trials per configuration, taken in turns: step time is the %s of the trials, and configurations "
                "whose %ss differ by less than their trials' spreads together are within noise (among those within "
                "noise of the fastest, the least memory wins, then the simplest)",
                trials, trials == 2 ? "mean" : "median", trials == 2 ? "mean" : "median");
}

std::string convergence_noise_note(int trials) {
  if (trials == 1)
    return "one trial per row: the time to the target has no noise estimate (--trials 3 measures one), and the "
           "target no spread (--target-tolerance X counts a row within X of it as reaching it; a row that misses "
           "shows how close it came); rows that reach the target at the same step within 5% of the first's time "
           "are within noise of it, and the first listed of them is recommended";
  return format("%d trials per row, taken in turns: a row's time to the target is the %s of its trials', and the "
                "first by it is recommended; rows that reach the target at the same step within their trials' "
                "spreads (or 5%%) of that time are within noise of it, and the first listed of them is recommended",
                trials, trials == 2 ? "mean" : "median");
}

// The reference is the first row's configuration: those of its trials that ran. The default target is the
// highest of their final losses, so that every trial of the reference reaches it (one trial: its
// final loss); the ratios are over their mean final loss.
double convergence_figures(std::vector<RowResult> &rows, double target_loss, double tolerance) {
  double worst = -1, sum = 0;
  int ran = 0;
  for (const RowResult &r : rows)
    if (r.row.name == rows[0].row.name && r.status == "ok" && !r.evals.empty()) {
      worst = std::max(worst, r.evals.back().loss);
      sum += r.evals.back().loss;
      ++ran;
    }
  const double reference = ran > 0 ? sum / ran : 0;
  const double target = target_loss >= 0 ? target_loss : worst, reached = target * (1 + tolerance);
  for (RowResult &r : rows) {
    r.loss_ratio = 0, r.target_s = -1, r.target_step = -1, r.best_over_target = 0;
    if (r.status != "ok" || r.evals.empty()) continue;
    if (ran > 0) r.loss_ratio = r.evals.back().loss / reference;
    if (target > 0)
      for (const EvalPoint &point : r.evals)
        r.best_over_target = std::min(r.best_over_target > 0 ? r.best_over_target : INFINITY, point.loss / target);
    for (const EvalPoint &point : r.evals)
      if (target >= 0 && point.loss <= reached) {
        r.target_s = point.train_s;
        r.target_step = point.step;
        break;
      }
  }
  // How much longer each row needs than the first: over the center of its trials' arrivals.
  std::vector<double> first_steps, first_times;
  for (const RowResult &r : rows)
    if (r.row.name == rows[0].row.name && r.target_step >= 0) {
      first_steps.push_back(double(r.target_step));
      first_times.push_back(r.target_s);
    }
  const double steps = center(first_steps), seconds = center(first_times);
  for (RowResult &r : rows) {
    r.steps_over_first = r.target_step >= 0 && steps > 0 ? double(r.target_step) / steps : 0;
    r.time_over_first = r.target_step >= 0 && seconds > 0 ? r.target_s / seconds : 0;
  }
  return target;
}

int64_t convergence_steps(const SuiteOptions &options, const SuiteRow &row, bool first) {
  const double factor = row.steps_factor > 0 ? row.steps_factor : first ? 1.0 : options.steps_factor;
  return std::max<int64_t>(1, std::llround(double(options.num_steps) * factor));
}

// convergence: b reaches the target at a's step, in a's time within the spreads of both (or 5%).
bool same_arrival(const Configuration &a, const Configuration &b) {
  const double spreads = (a.max_target_s - a.min_target_s) + (b.max_target_s - b.min_target_s);
  return a.center_target_step == b.center_target_step &&
         std::abs(a.median_target_s - b.median_target_s) <= std::max(0.05 * a.median_target_s, spreads);
}

Recommendation recommend_convergence(const std::vector<RowResult> &rows, double target) {
  Recommendation rec;
  rec.reasons.resize(rows.size());
  rec.verdicts.resize(rows.size());
  std::vector<Configuration> all = configurations(rows);
  std::vector<std::string> reason(all.size()), verdict(all.size());
  const Configuration *best = nullptr;
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (c.failed) {
      reason[k] = failure(c);
      verdict[k] = c.failed->status;
    } else if (target < 0) {
      reason[k] = "no target loss: the first row did not run (give --target-loss)";
      verdict[k] = "no target";
    } else if (const RowResult *r = c.missed) {
      reason[k] = format("did not reach %.4f%s (final held-out loss %.4f)", target,
                         c.rows.size() > 1 ? format(" in trial %d", r->trial).c_str() : "",
                         r->evals.empty() ? 0.0 : r->evals.back().loss);
      verdict[k] = "did not reach";
    } else if (!best || c.median_target_s < best->median_target_s) {
      best = &c;
    }
  }
  auto time_text = [](const Configuration &c) {
    return format(c.rows.size() > 1 ? "median %.1f s" : "%.1f s", c.median_target_s);
  };
  // Those that arrive with the first (the same step, about the same time): the first listed of them wins.
  const Configuration *fastest = best;
  std::vector<std::string> tied;
  for (size_t k = 0; fastest && k < all.size(); ++k)
    if (reason[k].empty() && &all[k] != fastest && same_arrival(*fastest, all[k])) {
      if (&all[k] < best) best = &all[k];
      tied.push_back(all[k].name(rows));
    }
  if (!tied.empty()) tied.push_back(fastest->name(rows));
  for (size_t k = 0; k < all.size(); ++k) {
    const Configuration &c = all[k];
    if (&c == best) {
      rec.chosen = int(c.rows.front());
      verdict[k] = "chosen";
      reason[k] = format("first to held-out loss %.4f: %s of training (step %lld)", target, time_text(c).c_str(),
                         (long long)rows[c.rows.front()].target_step);
      if (!tied.empty())
        reason[k] += format("; %zu rows arrive together (the same step, within noise): the first listed", tied.size());
    } else if (reason[k].empty() && fastest && same_arrival(*fastest, c)) {
      verdict[k] = "within noise";
      reason[k] = format("within noise of %s: %s vs %.1f s, both at step %lld", best->name(rows).c_str(),
                         time_text(c).c_str(), best->median_target_s, (long long)rows[c.rows.front()].target_step);
    } else if (reason[k].empty()) {
      verdict[k] = "later";
      reason[k] = format("later to %.4f: %s vs %.1f s (%s)", target, time_text(c).c_str(), best->median_target_s,
                         rows[best->rows.front()].row.name.c_str());
    }
    for (size_t i : c.rows) {
      rec.reasons[i] = reason[k];
      rec.verdicts[i] = verdict[k];
    }
  }
  return rec;
}

}  // namespace zf
