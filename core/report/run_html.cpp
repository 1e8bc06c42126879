#include "report/run_html.hpp"

#include "report/report.hpp"
#include "report/svg_chart.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"
#include "runtime/memory.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>

namespace zf {

RunPoint run_point(const StepRecord &r) {
  RunPoint p;
  p.step = r.step;
  p.loss = r.loss;
  p.eval_loss = r.eval_loss;
  p.lr = r.lr;
  p.step_ms = r.step_ms;
  p.memory = r.memory;
  p.gpu_peak = r.device_allocated_peak;
  return p;
}

std::vector<RunPoint> read_run_points(const std::filesystem::path &steps_jsonl) {
  std::vector<RunPoint> points;
  uint64_t first_bad = 0, bad = 0;
  std::string why_bad;
  // Line by line (a log of any size in bounded memory); a row that is not one zfcore wrote (a value of
  // another type, nesting, a line past 1 MiB) is left out of the charts and named once.
  for_each_line(steps_jsonl.string(), size_t(1) << 20, [&](const TextLine &line) {
    if (!line.complete || line.text.empty()) return true;
    std::string problem = line.too_long ? "longer than 1 MiB" : "";
    nlohmann::json j;
    if (problem.empty()) {
      try {
        j = parse_json(line.text, "the row");
        if (!j.is_object() || !j.contains("step")) return true;  // not a row
        RunPoint p;
        p.step = j.value("step", int64_t(0));
        p.loss = j.value("loss", 0.0);
        p.eval_loss = j.value("eval_loss", -1.0);
        p.lr = j.value("lr", 0.0);
        p.step_ms = j.value("step_ms", 0.0);
        if (j.contains("memory_bytes") && j["memory_bytes"].is_object())
          for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
            p.memory[tier] = j["memory_bytes"].value(tier_name(zf_tier(tier)), uint64_t(0));
        if (j.contains("gpu_peak_bytes") && j["gpu_peak_bytes"].is_object())
          p.gpu_peak = j["gpu_peak_bytes"].value("allocated", uint64_t(0));
        points.push_back(p);
      } catch (const nlohmann::json::exception &e) {  // a value of another type than zfcore writes
        problem = excerpt(e.what(), 200);
      } catch (const Error &e) {
        problem = e.what();
      }
    }
    if (!problem.empty() && bad++ == 0) first_bad = line.number, why_bad = problem;
    return true;
  });
  if (bad)
    log_warn(format("%s:%llu: not a step row zfcore writes (%s)%s: left out of the run's charts (report.html); fix or "
                    "remove the line(s)", steps_jsonl.c_str(), (unsigned long long)first_bad, why_bad.c_str(),
                    bad > 1 ? format(", and %llu more line(s)", (unsigned long long)(bad - 1)).c_str() : ""));
  return points;
}

namespace {

// Over steps (x = the step) or over training time (x = the steps' own seconds up to the point).
// A dot on the training loss where the run resumed (the first step after `resumed_step`, > 0).
std::string loss_chart(const std::vector<RunPoint> &points, bool over_time, int64_t resumed_step) {
  svg::Line train{"training loss", {}, {}, {}, {}}, eval{"held-out loss", {}, {}, {}, {}};
  double seconds = 0;
  for (const RunPoint &p : points) {
    seconds += p.step_ms / 1000;
    const double x = over_time ? seconds : double(p.step);
    if (resumed_step > 0 && p.step == resumed_step + 1) {
      train.marked.push_back(train.values.size());
      train.marked_notes.push_back(format("step %lld: resumed from the checkpoint of step %lld", (long long)p.step,
                                          (long long)resumed_step));
    }
    train.values.push_back(p.loss);
    train.x.push_back(x);
    if (p.eval_loss < 0) continue;
    eval.marked.push_back(eval.values.size());
    eval.marked_notes.push_back(format("step %lld", (long long)p.step));
    eval.values.push_back(p.eval_loss);
    eval.x.push_back(x);
  }
  std::vector<svg::Line> lines{train};
  if (!eval.values.empty()) lines.push_back(eval);
  svg::LineAxes axes;
  axes.y = {"loss", 1};
  axes.x_unit = over_time ? "s of training" : "step";
  axes.y_from_zero = false;
  axes.marker = "point";
  return svg::lines(over_time ? "loss-time" : "loss-step", lines, axes);
}

std::string lr_chart(const std::vector<RunPoint> &points) {
  svg::Line lr{"learning rate", {}, {}, {}, {}};
  for (const RunPoint &p : points) lr.values.push_back(p.lr), lr.x.push_back(double(p.step));
  svg::LineAxes axes;
  axes.y = {"lr", 1};
  return svg::lines("lr", {lr}, axes);
}

// Every step's time; a dot on each step over kSpikeFactor x the median, its factor in the tooltip.
std::string step_time_chart(const std::vector<RunPoint> &points, size_t &spikes) {
  svg::Line time{"step time", {}, {}, {}, {}};
  std::vector<double> sorted;
  for (const RunPoint &p : points) sorted.push_back(p.step_ms);
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
  for (const RunPoint &p : points) {
    if (median > 0 && p.step_ms > kSpikeFactor * median) {
      time.marked.push_back(time.values.size());
      time.marked_notes.push_back(format("%.1fx the median %.1f ms", p.step_ms / median, median));
    }
    time.values.push_back(p.step_ms);
    time.x.push_back(double(p.step));
  }
  spikes = time.marked.size();
  svg::LineAxes axes;
  axes.y = {"ms", 1};
  axes.marker = "spike";
  return svg::lines("step-time", {time}, axes);
}

// One line per tier that held memory (and the GPU's allocator peak on GPU runs).
std::string memory_chart(const std::vector<RunPoint> &points) {
  std::vector<svg::Line> lines;
  uint64_t largest = 0;
  for (int tier = 0; tier <= ZF_TIER_COUNT; ++tier) {
    const bool gpu = tier == ZF_TIER_COUNT;
    svg::Line l{gpu ? "GPU allocator peak" : std::string(tier_name(zf_tier(tier))) + " tier", {}, {}, {}, {}};
    uint64_t most = 0;
    for (const RunPoint &p : points) {
      const uint64_t bytes = gpu ? p.gpu_peak : p.memory[tier];
      most = std::max(most, bytes);
      l.values.push_back(double(bytes));
      l.x.push_back(double(p.step));
    }
    largest = std::max(largest, most);
    if (most > 0) lines.push_back(l);
  }
  svg::LineAxes axes;
  axes.y = largest >= (uint64_t(1) << 30) ? svg::Axis{"GiB", double(uint64_t(1) << 30)}
                                          : svg::Axis{"MiB", double(uint64_t(1) << 20)};
  return lines.empty() ? "<p class=\"note\">No tier held memory.</p>\n" : svg::lines("memory", lines, axes);
}

}  // namespace

std::string run_html(const std::string &title, const std::vector<RunPoint> &points, int64_t resumed_step) {
  using svg::escape;
  std::string body = "<h1>zfcore run " + escape(title) + "</h1>\n";
  if (points.empty()) return svg::html_page("zfcore run " + title, body + "<p>No step has run yet.</p>\n");
  const RunPoint &last = points.back();
  double seconds = 0;
  for (const RunPoint &p : points) seconds += p.step_ms / 1000;
  body += format("<p>%zu steps (to step %lld), %.1f s of training (the steps' own time). Loss %.4f at the last step",
                 points.size(), (long long)last.step, seconds, last.loss);
  for (auto p = points.rbegin(); p != points.rend(); ++p)
    if (p->eval_loss >= 0) {
      body += format(", held-out loss %.4f at step %lld", p->eval_loss, (long long)p->step);
      break;
    }
  if (resumed_step > 0)
    body += format(". Resumed from the checkpoint of step %lld: the steps up to it are the earlier run's (a dot marks "
                   "step %lld on the loss)", (long long)resumed_step, (long long)resumed_step + 1);
  body += ". Data: <a href=\"steps.csv\">steps.csv</a>, <a href=\"steps.jsonl\">steps.jsonl</a>, <a "
          "href=\"summary.json\">summary.json</a>; <code>tensorboard --logdir tensorboard</code> here for TensorBoard.</p>\n";
  body += "<h2>Loss over steps</h2>\n<p class=\"note\">The training loss of every step; a dot per evaluation on the "
          "held-out data.</p>\n" + loss_chart(points, false, resumed_step);
  body += "<h2>Loss over training time</h2>\n<p class=\"note\">Time is the sum of the steps' own times (evaluations, "
          "checkpoints and start-up left out).</p>\n" + loss_chart(points, true, resumed_step);
  body += "<h2>Learning rate</h2>\n" + lr_chart(points);
  size_t spikes = 0;
  std::string time = step_time_chart(points, spikes);
  body += format("<h2>Step time</h2>\n<p class=\"note\">Every step; a dot on each of the %zu step%s that took over "
                 "%.0fx the median step.</p>\n", spikes, spikes == 1 ? "" : "s", kSpikeFactor) + time;
  body += "<h2>Memory per tier</h2>\n<p class=\"note\">Rank 0's memory ledger after each step: the device, pinned "
          "and host tiers (a CPU run keeps the model and its state in the host tier) and, on GPU runs, the CUDA "
          "allocator's peak in the step.</p>\n" + memory_chart(points);
  return svg::html_page("zfcore run " + title, body);
}

}  // namespace zf
