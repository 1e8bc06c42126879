// suite_html.cpp: OUTPUT_DIR/<suite>_<time>.html, the report people look at: one self-contained
// file (svg::html_page: inline CSS and SVG, no library, nothing fetched) with the rows' table, (convergence) the
// held-out loss over steps and over training time, the step-time breakdown, the memory per tier
// beside the estimate, the step times over steps and every timer's mean.
#include "bench/suite.hpp"
#include "report/svg_chart.hpp"

#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <filesystem>

namespace zf {
namespace {

using svg::escape;

// A configuration's name, with its trial when there are several.
std::string row_label(const SuiteOptions &o, const RowResult &r) {
  return o.trials > 1 ? format("%s #%d", r.row.name.c_str(), r.trial) : r.row.name;
}

std::string status_note(const RowResult &r) { return r.status + (r.message.empty() ? "" : ": " + r.message); }

std::string breakdown_chart(const SuiteOptions &o, const std::vector<RowResult> &rows) {
  std::vector<svg::Bars> bars;
  for (const RowResult &r : rows) {
    if (r.status != "ok") {
      bars.push_back({row_label(o, r), {}, status_note(r)});
      continue;
    }
    double rest = std::max(0.0, r.mean_step_ms - r.fwd_ms - r.bwd_ms - r.step_ms);
    bars.push_back({row_label(o, r), {r.fwd_ms, r.bwd_ms, r.step_ms, rest}, ""});
  }
  return svg::stacked_bars("step-time", {"fwd", "bwd", "optimizer step", "rest of the step"}, bars, {"ms", 1});
}

std::string memory_chart(const SuiteOptions &o, const std::vector<RowResult> &rows) {
  std::vector<svg::Bars> bars;
  uint64_t largest = 0;
  for (const RowResult &r : rows) {
    if (r.status != "ok") {
      bars.push_back({row_label(o, r), {}, status_note(r)});
      continue;
    }
    largest = std::max({largest, r.gpu_peak, r.host_ledger_peak, r.pinned_peak, r.host_rss, r.estimate});
    bars.push_back({row_label(o, r),
                    {double(r.gpu_peak), double(r.host_ledger_peak), double(r.pinned_peak), double(r.host_rss),
                     double(r.estimate)},
                    ""});
  }
  svg::Axis axis = largest >= (uint64_t(1) << 30) ? svg::Axis{"GiB", double(uint64_t(1) << 30)}
                                                  : svg::Axis{"MiB", double(uint64_t(1) << 20)};
  std::string device = o.device == "cuda" ? "GPU peak" : "device tier peak";  // on CPU runs the host tier holds all
  return svg::grouped_bars("memory", {device, "host tier peak", "pinned tier peak", "host RSS", "estimate"}, bars, axis);
}

// ZenFlow's boundary steps are those whose update events include a CPU update or a swap.
std::string trace_chart(const SuiteOptions &o, const std::vector<RowResult> &rows) {
  std::vector<svg::Line> series;
  for (const RowResult &r : rows) {
    svg::Line line{row_label(o, r), {}, {}, {}, {}};
    if (r.status == "ok") line.values = r.step_times_ms;
    else line.label += " (" + r.status + ")";
    for (size_t i = 0; i < r.step_updates.size(); ++i)
      if (r.step_updates[i].find("cpu") != std::string::npos || r.step_updates[i].find("swap") != std::string::npos) {
        line.marked.push_back(i);
        line.marked_notes.push_back(r.step_updates[i]);
      }
    series.push_back(line);
  }
  svg::LineAxes axes;
  axes.y = {"ms", 1};
  int64_t warmup = o.warmup_steps;  // the longest (offload.ratio = "auto" rows warm up longer: warmup_note)
  for (const RowResult &r : rows) warmup = std::max(warmup, r.warmup_steps);
  axes.shaded = size_t(warmup);
  return svg::lines("step-trace", series, axes);
}

// convergence: each row's held-out loss at its evaluations, against the step or the training
// seconds, the target as a dashed line.
std::string loss_chart(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                       bool over_time) {
  std::vector<svg::Line> series;
  for (const RowResult &r : rows) {
    svg::Line line{row_label(o, r), {}, {}, {}, {}};
    if (r.status != "ok") line.label += " (" + r.status + ")";
    for (size_t i = 0; i < r.evals.size(); ++i) {
      const EvalPoint &p = r.evals[i];
      line.values.push_back(p.loss);
      line.x.push_back(over_time ? p.train_s : double(p.step));
      line.marked.push_back(i);
      line.marked_notes.push_back(format("step %lld, %.1f s", (long long)p.step, p.train_s));
    }
    series.push_back(line);
  }
  svg::LineAxes axes;
  axes.y = {"held-out loss", 1};
  axes.x_unit = over_time ? "seconds of training" : "step";
  axes.y_from_zero = false;
  axes.reference = report.target_loss;
  axes.reference_label = "target";
  axes.marker = "point";
  return svg::lines(over_time ? "loss-time" : "loss-step", series, axes);
}

std::string cell(const std::string &text) { return "<td>" + escape(text) + "</td>"; }
std::string bytes_cell(uint64_t bytes) { return cell(bytes ? format_bytes(bytes) : "-"); }
std::string ms_cell(bool ok, double ms) { return cell(ok ? format("%.2f", ms) : "-"); }

std::string rows_table(const std::vector<RowResult> &rows, const Recommendation &rec) {
  std::string out = "<table id=\"rows\"><tr><th>config</th><th>trial</th><th>status</th><th>step ms</th>"
                    "<th>floor ms</th><th>/ floor</th><th>tokens/s</th><th>fwd ms</th><th>bwd ms</th><th>optimizer step ms</th><th>GPU peak</th>"
                    "<th>GPU end</th><th>host RSS</th><th>pinned</th><th>estimate</th><th>recommendation</th>"
                    "<th>message</th></tr>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    bool ok = r.status == "ok";
    out += format("<tr class=\"status-%s%s\">", escape(r.status).c_str(),
                  rec.picks(rows, i) ? " chosen" : i < rec.verdicts.size() && rec.verdicts[i] == "within noise" ? " within-noise" : "");
    out += cell(r.row.name) + cell(std::to_string(r.trial)) + cell(r.status) + ms_cell(ok, r.mean_step_ms) +
           ms_cell(ok && r.floor_ms > 0, r.floor_ms) +
           cell(ok && r.floor_ms > 0 ? format("%.2f", r.step_over_floor()) : "-");
    out += cell(ok ? format("%.0f", r.tokens_per_s) : "-") + ms_cell(ok, r.fwd_ms) + ms_cell(ok, r.bwd_ms) +
           ms_cell(ok, r.step_ms);
    out += bytes_cell(r.gpu_peak) + bytes_cell(r.gpu_allocated_end) + bytes_cell(r.host_rss) +
           bytes_cell(r.pinned_peak) + bytes_cell(r.estimate) + cell(rec.reasons[i]) + cell(r.message) + "</tr>\n";
  }
  return out + "</table>\n";
}

std::string convergence_table(const std::vector<RowResult> &rows, const Recommendation &rec) {
  std::string out = "<table id=\"rows\"><tr><th>config</th><th>trial</th><th>status</th><th>steps</th>"
                    "<th>held-out loss</th><th>/ first</th><th>train s</th><th>time to target</th><th>steps to target</th><th>step ms</th>"
                    "<th>GPU peak</th><th>host RSS</th><th>recommendation</th><th>message</th></tr>\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    bool ok = r.status == "ok", evaluated = !r.evals.empty();
    out += format("<tr class=\"status-%s%s\">", escape(r.status).c_str(), rec.picks(rows, i) ? " chosen" : "");
    out += cell(r.row.name) + cell(std::to_string(r.trial)) + cell(r.status);
    out += cell(evaluated ? std::to_string(r.evals.back().step) : "-");
    out += cell(evaluated ? format("%.4f", r.evals.back().loss) : "-");
    out += cell(r.loss_ratio > 0 ? format("%.3f", r.loss_ratio) : "-");
    out += cell(evaluated ? format("%.1f", r.evals.back().train_s) : "-");
    out += cell(time_to_target_text(r)) + cell(steps_to_target_text(r)) + ms_cell(ok, r.mean_step_ms);
    out += bytes_cell(r.gpu_peak) + bytes_cell(r.host_rss) + cell(rec.reasons[i]) + cell(r.message) + "</tr>\n";
  }
  return out + "</table>\n";
}

// Every timer of the runs (waits, the CPU update, ZenFlow's phases), mean ms over the timed steps.
std::string timers_table(const SuiteOptions &o, const std::vector<RowResult> &rows) {
  std::vector<std::string> names;
  for (const RowResult &r : rows)
    for (const auto &[name, ms] : r.timers_ms)
      if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  if (names.empty()) return "<p>No configuration recorded timers.</p>\n";
  std::string out = "<table id=\"timers\"><tr><th>config</th>";
  for (const std::string &name : names) out += "<th>" + escape(name) + "</th>";
  out += "</tr>\n";
  for (const RowResult &r : rows) {
    if (r.status != "ok") continue;
    out += "<tr>" + cell(row_label(o, r));
    for (const std::string &name : names) {
      auto it = std::find_if(r.timers_ms.begin(), r.timers_ms.end(), [&](const auto &t) { return t.first == name; });
      out += cell(it == r.timers_ms.end() ? "-" : format("%.2f", it->second));
    }
    out += "</tr>\n";
  }
  return out + "</table>\n";
}

}  // namespace

std::string suite_html(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                       const Recommendation &rec) {
  std::string stem = std::filesystem::path(report.stem).filename().string();
  std::string title = format("zfcore bench %s", o.suite.c_str());
  std::string out = "<h1>" + escape(title) + "</h1>\n";
  const bool convergence = o.suite == "convergence";
  if (convergence)
    out += format("<p>The held-out loss every %lld steps. Target: %s (%s). Time is training time: the sum of the "
                  "steps' own times up to an evaluation (evaluations and start-up left out).</p>\n",
                  (long long)o.eval_every,
                  report.target_loss >= 0 ? format("held-out loss %.4f", report.target_loss).c_str() : "none",
                  escape(report.target_from).c_str());
  std::string steps = convergence ? format("%lld steps (the first %lld left out of the mean step time%s)",
                                           (long long)o.num_steps, (long long)o.warmup_steps, warmup_note(o, rows).c_str())
                                    : format("%lld timed steps after %lld warm-up step%s%s", (long long)o.num_steps,
                                           (long long)o.warmup_steps, o.warmup_steps == 1 ? "" : "s",
                                           warmup_note(o, rows).c_str());
  out += format("<p>%s, %d rank%s, %s, %d trial%s per configuration. "
                "Data: <a href=\"%s.json\">%s.json</a>, <a href=\"%s.csv\">%s.csv</a>.</p>\n",
                escape(o.device).c_str(), o.ranks, o.ranks == 1 ? "" : "s", steps.c_str(), o.trials,
                o.trials == 1 ? "" : "s", escape(stem).c_str(), escape(stem).c_str(), escape(stem).c_str(),
                escape(stem).c_str());
  if (rec.chosen >= 0)
    out += "<p id=\"recommended\"><b>Recommended: " + escape(rows[size_t(rec.chosen)].row.name) + "</b> (" +
           escape(rec.reasons[size_t(rec.chosen)]) + "), written to recommended-" + escape(o.suite) + ".toml.</p>\n";
  else
    out += format("<p id=\"recommended\"><b>No configuration ran and %s: nothing to recommend.</b></p>\n",
                  convergence ? "reached the target" : "fit");
  out += "<p id=\"noise\" class=\"note\">" +
         escape(convergence ? convergence_noise_note(o.trials) : noise_note(o.trials)) + ".</p>\n";
  if (convergence) {
    out += "<h2>Configurations</h2>\n" + convergence_table(rows, rec);
    out += "<h2>Held-out loss over steps</h2>\n<p class=\"note\">Learning per step: the lower, the more each step "
           "taught the model. A dot per evaluation.</p>\n" + loss_chart(o, report, rows, false);
    out += "<h2>Held-out loss over training time</h2>\n<p class=\"note\">What a user waits for: the first line to "
           "cross the dashed target is the recommendation.</p>\n" + loss_chart(o, report, rows, true);
  } else {
    out += "<h2>Configurations</h2>\n" + rows_table(rows, rec);
  }
  out += "<h2>Where a step's time goes</h2>\n<p class=\"note\">Means over the timed steps of each run's own "
         "timers; the rest of the step is its time outside the forward, the backward and the optimizer step.</p>\n" +
         breakdown_chart(o, rows);
  out += "<h2>Memory per tier</h2>\n<p class=\"note\">Measured peaks of rank 0: the memory ledger's device, host "
         "and pinned tiers (on GPU runs the device tier is the CUDA allocator's peak; on CPU runs the model "
         "and its state are in the host tier), the largest process's peak resident set, and <code>zfcore "
         "estimate</code>'s bytes per rank for the same configuration, before it ran.</p>\n" + memory_chart(o, rows);
  out += "<h2>Step time over steps</h2>\n<p class=\"note\">Every step, the warm-up (grey) included; a dot marks a "
         "step that started or swapped in a CPU update (ZenFlow's boundary steps).</p>\n" + trace_chart(o, rows);
  out += "<h2>Timers</h2>\n<p class=\"note\">Mean ms per timed step; timers nest (waits inside the forward or the "
         "optimizer step) and some run on the update thread, so a row does not add up to the step.</p>\n" +
         timers_table(o, rows);
  return svg::html_page(title + " " + stem, out);
}

}  // namespace zf
