// suite_report.cpp: what a suite tells the user: the console table (and the ZenFlow sweep's
// table), OUTPUT_DIR/<suite>_<time>.json, .csv and .html (suite_html.cpp), OUTPUT_DIR/recommended-<suite>.toml.
#include "bench/suite.hpp"

#include "bench/offload_floor.hpp"

#include "config/config.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/json.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <sstream>
#include <toml++/toml.h>

namespace zf {
namespace {

std::string bytes_text(uint64_t bytes) { return bytes ? format_bytes(bytes) : "-"; }

std::string csv_field(const std::string &text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c == '\n' ? ' ' : c);
  return quoted + "\"";
}

// Every row's own overrides plus the user's, as the recommendation writes them.
std::vector<std::string> config_overrides(const SuiteReport &report, const SuiteRow &row) {
  std::vector<std::string> all = report.common;
  all.insert(all.end(), row.overrides.begin(), row.overrides.end());
  return all;
}

void write_text(const std::string &path, const std::string &text) { write_file_atomically(path, text); }

std::string json_text(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                      const Recommendation &rec) {
  JsonWriter json;
  json.begin_object();
  json.key("suite").value(o.suite).key("device").value(o.device).key("ranks").value(o.ranks);
  json.key("num_steps").value(o.num_steps).key("warmup_steps").value(o.warmup_steps).key("trials").value(o.trials);
  json.key("base_config").value(report.base_config);
  json.key("common_overrides").begin_array();
  for (const std::string &item : report.common) json.value(item);
  json.end_array();
  const bool convergence = o.suite == "convergence";
  json.key("noise").value(convergence ? convergence_noise_note(o.trials) : noise_note(o.trials));
  if (convergence) {
    json.key("eval_every").value(o.eval_every);
    json.key("target_loss").value(report.target_loss >= 0 ? report.target_loss : std::nan(""));
    json.key("target_from").value(report.target_from);
    json.key("target_tolerance").value(report.target_tolerance);
  }
  json.key("limits").begin_object().key("gpu_bytes").value(report.limits.gpu_bytes);
  json.key("host_bytes").value(report.limits.host_bytes).end_object();
  if (o.suite == "scale") {
    json.key("parameters").value(report.parameters).key("peak_flops_per_gpu").value(report.peak_flops);
    json.key("peak_source").value(report.peak_source);
  }
  if (bench::has_floor(o.suite)) {
    json.key("link_rates").begin_object().key("host_bytes_per_s").value(report.rates.host_bytes_per_s);
    json.key("down_bytes_per_s").value(report.rates.down_bytes_per_s);
    json.key("up_bytes_per_s").value(report.rates.up_bytes_per_s).end_object();
  }
  json.key("rows").begin_array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    json.begin_object().key("config").value(r.row.name).key("trial").value(r.trial);
    json.key("status").value(r.status).key("message").value(r.message);
    json.key("reason").value(rec.reasons[i]).key("verdict").value(rec.verdicts[i]);
    json.key("recommended").value(rec.picks(rows, i));
    json.key("overrides").begin_array();
    for (const std::string &item : r.row.overrides) json.value(item);
    json.end_array().key("labels").begin_object();
    for (const auto &[name, value] : r.row.labels) json.key(name).value(value);
    json.end_object();
    json.key("mean_step_ms").value(r.mean_step_ms).key("fwd_ms").value(r.fwd_ms).key("bwd_ms").value(r.bwd_ms);
    json.key("optimizer_step_ms").value(r.step_ms).key("selective_optimizer_step_ms").value(r.selective_step_ms);
    json.key("tokens_per_s").value(r.tokens_per_s).key("timed_steps").value(r.timed_steps);
    json.key("warmup_steps").value(r.warmup_steps);
    json.key("gpu_peak_bytes").value(r.gpu_peak).key("gpu_allocated_end_bytes").value(r.gpu_allocated_end);
    json.key("host_rss_bytes").value(r.host_rss).key("pinned_peak_bytes").value(r.pinned_peak);
    json.key("host_ledger_peak_bytes").value(r.host_ledger_peak);
    json.key("estimate_bytes").value(r.estimate).key("estimate_note").value(r.estimate_note);
    json.key("host_update_bytes_per_step").value(r.host_update_bytes_per_step);
    json.key("offload_bytes_down_per_step").value(r.down_bytes_per_step);
    json.key("offload_bytes_up_per_step").value(r.up_bytes_per_step);
    json.key("floor_ms").value(r.floor_ms).key("step_over_floor").value(r.step_over_floor());
    json.key("estimate_device_bytes").value(r.estimate_device).key("estimate_pinned_bytes").value(r.estimate_pinned);
    if (o.suite == "scale") {
      json.key("mfu").value(r.mfu).key("compute_ms").value(r.compute_ms).key("practicality").value(r.practicality);
      json.key("time_to_first_step_s").value(r.startup_s);
    }
    json.key("wall_s").value(r.wall_s).key("startup_s").value(r.startup_s);
    json.key("timers_ms").begin_object();
    for (const auto &[name, ms] : r.timers_ms) json.key(name).value(ms);
    json.end_object().key("step_times_ms").begin_array();
    for (double ms : r.step_times_ms) json.value(ms);
    json.end_array().key("step_updates").begin_array();
    for (const std::string &update : r.step_updates) json.value(update);
    json.end_array();
    if (convergence) {
      json.key("eval_curve").begin_array();
      for (const EvalPoint &p : r.evals)
        json.begin_object().key("step").value(p.step).key("loss").value(p.loss).key("train_s").value(p.train_s).end_object();
      json.end_array();
      json.key("final_eval_loss").value(r.evals.empty() ? std::nan("") : r.evals.back().loss);
      json.key("loss_ratio").value(r.loss_ratio > 0 ? r.loss_ratio : std::nan(""));
      json.key("train_s").value(r.evals.empty() ? std::nan("") : r.evals.back().train_s);
      json.key("time_to_target_s").value(r.target_step >= 0 ? r.target_s : std::nan(""));
      json.key("steps_to_target").value(r.target_step >= 0 ? double(r.target_step) : std::nan(""));
      json.key("steps_over_first").value(r.steps_over_first > 0 ? r.steps_over_first : std::nan(""));
      json.key("time_over_first").value(r.time_over_first > 0 ? r.time_over_first : std::nan(""));
      json.key("closest_over_target").value(r.best_over_target > 0 ? r.best_over_target : std::nan(""));
    }
    json.key("run_dir").value(r.run_dir).key("log").value(r.run_dir + ".log");
    json.end_object();
  }
  json.end_array();
  json.key("recommended").value(rec.chosen >= 0 ? rows[size_t(rec.chosen)].row.name : "");
  json.end_object();
  return json.str() + "\n";
}

std::string csv_text(const SuiteOptions &o, const std::vector<RowResult> &rows, const Recommendation &rec) {
  std::string labels;
  if (!rows.empty())
    for (const auto &[name, value] : rows[0].row.labels) labels += "," + name;
  const bool convergence = o.suite == "convergence";
  std::string text = "suite,config,trial" + labels + ",status" + (o.suite == "scale" ? scale_csv_header() : "") +
                     (convergence ? ",final_eval_loss,loss_ratio,train_s,time_to_target_s,steps_to_target" : "") +
                     ",mean_step_ms,fwd_ms,bwd_ms,optimizer_step_ms,selective_optimizer_step_ms,tokens_per_s,floor_ms,"
                     "step_over_floor,warmup_steps,gpu_peak_bytes,gpu_allocated_end_bytes,host_rss_bytes,pinned_peak_bytes,estimate_bytes,wall_s,"
                     "startup_s,recommended,verdict,reason,message\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    text += o.suite + "," + csv_field(r.row.name) + "," + std::to_string(r.trial);
    for (const auto &[name, value] : r.row.labels) text += "," + csv_field(value);
    text += "," + r.status;
    if (o.suite == "scale") text += scale_csv_fields(r);
    if (convergence) {  // empty fields where a row has no figure
      bool evaluated = !r.evals.empty(), reached = r.target_step >= 0;
      text += "," + (evaluated ? format("%.6f", r.evals.back().loss) : "") + "," +
              (r.loss_ratio > 0 ? format("%.6f", r.loss_ratio) : "") + "," +
              (evaluated ? format("%.3f", r.evals.back().train_s) : "") + "," + (reached ? format("%.3f", r.target_s) : "") +
              "," + (reached ? std::to_string(r.target_step) : "");
    }
    text += format(",%.3f,%.3f,%.3f,%.3f,%.3f,%.1f,%s,%s,%lld,%llu,%llu,%llu,%llu,%llu,%.1f,%.1f,%s,",
                   r.mean_step_ms, r.fwd_ms, r.bwd_ms, r.step_ms, r.selective_step_ms, r.tokens_per_s,
                   r.floor_ms > 0 ? format("%.3f", r.floor_ms).c_str() : "",
                   r.floor_ms > 0 ? format("%.4f", r.step_over_floor()).c_str() : "", (long long)r.warmup_steps,
                   (unsigned long long)r.gpu_peak, (unsigned long long)r.gpu_allocated_end,
                   (unsigned long long)r.host_rss, (unsigned long long)r.pinned_peak, (unsigned long long)r.estimate,
                   r.wall_s, r.startup_s, rec.picks(rows, i) ? "true" : "false");
    text += csv_field(rec.verdicts[i]) + "," + csv_field(rec.reasons[i]) + "," + csv_field(r.message) + "\n";
  }
  return text;
}

// A TOML value as a user writes it: numbers in their shortest form (0.1, not toml++'s
// 0.10000000000000001), strings in double quotes, the rest as toml++ prints it.
std::string value_text(const toml::node &node) {
  if (auto *real = node.as_floating_point()) return value_to_string(Value(real->get()));
  if (auto *text = node.as_string()) {
    std::string out = "\"";
    for (unsigned char c : text->get()) {
      if (c == '"' || c == '\\') out += '\\';
      out += c < 0x20 || c == 0x7f ? format("\\u%04X", c) : std::string(1, char(c));
    }
    return out + "\"";
  }
  if (auto *array = node.as_array()) {
    std::string out = "[";
    for (size_t i = 0; i < array->size(); ++i) out += (i ? ", " : "") + value_text(*array->get(i));
    return out + "]";
  }
  std::stringstream out;
  node.visit([&](const auto &value) { out << value; });
  return out.str();
}

// The config's tables, each key on a line of its own.
std::string toml_text(const toml::table &root) {
  std::string out;
  for (auto &&[name, node] : root)
    if (!node.is_table()) out += std::string(name.str()) + " = " + value_text(node) + "\n";
  for (auto &&[name, node] : root) {
    if (!node.is_table()) continue;
    out += "\n[" + std::string(name.str()) + "]\n";
    for (auto &&[key, value] : *node.as_table()) out += std::string(key.str()) + " = " + value_text(value) + "\n";
  }
  return out;
}

std::string loss_text(const RowResult &r) { return r.evals.empty() ? "-" : format("%.4f", r.evals.back().loss); }

// " (1.25x)": an arrival over the first row's ("how much longer to the same model").
std::string over_first(double ratio) { return ratio > 0 ? format(" (%.2fx)", ratio) : std::string(); }

}  // namespace

void print_columns(const std::vector<std::vector<std::string>> &table) {
  std::vector<size_t> width;
  for (const auto &line : table)
    for (size_t c = 0; c < line.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], line[c].size());
    }
  for (const auto &line : table) {
    std::string text;
    for (size_t c = 0; c < line.size(); ++c)
      text += c + 1 == line.size() ? line[c] : line[c] + std::string(width[c] - line[c].size() + 2, ' ');
    std::printf("%s\n", text.c_str());
  }
}

std::string time_to_target_text(const RowResult &r) {
  if (r.target_step >= 0) return format("%.1f s", r.target_s) + over_first(r.time_over_first);
  if (r.status != "ok") return "-";
  return r.best_over_target > 0 ? format("not reached (closest %.4fx)", r.best_over_target) : "not reached";
}

std::string steps_to_target_text(const RowResult &r) {
  return r.target_step >= 0 ? std::to_string(r.target_step) + over_first(r.steps_over_first) : "-";
}

namespace {

// convergence: the rows' final held-out loss, its ratio to the first row's and the time to the
// target, then the curves: each row's held-out loss (and training seconds) at every evaluation.
void print_convergence_tables(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                              const Recommendation &rec) {
  std::vector<std::vector<std::string>> table{{"config", "trial", "status", "steps", "held-out loss", "/ first",
                                               "train s", "time to target", "steps to target", "step ms", "GPU peak",
                                               "host RSS", "message"}};
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    bool ok = r.status == "ok";
    table.push_back({(rec.picks(rows, i) ? "* " : "  ") + r.row.name, std::to_string(r.trial), r.status,
                     r.evals.empty() ? "-" : std::to_string(r.evals.back().step), loss_text(r),
                     r.loss_ratio > 0 ? format("%.3f", r.loss_ratio) : "-",
                     r.evals.empty() ? "-" : format("%.1f", r.evals.back().train_s), time_to_target_text(r),
                     steps_to_target_text(r), ok ? format("%.1f", r.mean_step_ms) : "-", bytes_text(r.gpu_peak),
                     bytes_text(r.host_rss), rec.reasons[i]});
    if (o.trials == 1) table.back().erase(table.back().begin() + 1);
  }
  if (o.trials == 1) table[0].erase(table[0].begin() + 1);
  std::printf("zfcore bench convergence: %s, %d rank%s, %lld steps%s, held-out loss every %lld; target %s (%s)\n",
              o.device.c_str(), o.ranks, o.ranks == 1 ? "" : "s", (long long)o.num_steps,
              o.steps_factor != 1 ? format(" (the rows after the first: %gx)", o.steps_factor).c_str() : "",
              (long long)o.eval_every,
              report.target_loss >= 0 ? format("%.4f", report.target_loss).c_str() : "none",
              report.target_from.c_str());
  std::printf("(%s)\n", convergence_noise_note(o.trials).c_str());
  print_columns(table);

  std::vector<std::vector<std::string>> curves{{"step"}};
  std::vector<int64_t> steps;
  for (const RowResult &r : rows) {
    if (r.evals.empty()) continue;
    curves[0].push_back(r.row.name + (o.trials > 1 ? format(" #%d", r.trial) : "") + " (loss @ s)");
    for (const EvalPoint &p : r.evals)
      if (std::find(steps.begin(), steps.end(), p.step) == steps.end()) steps.push_back(p.step);
  }
  std::sort(steps.begin(), steps.end());
  for (int64_t step : steps) {
    std::vector<std::string> line{std::to_string(step)};
    for (const RowResult &r : rows) {
      if (r.evals.empty()) continue;
      auto at = std::find_if(r.evals.begin(), r.evals.end(), [&](const EvalPoint &p) { return p.step == step; });
      line.push_back(at == r.evals.end() ? "-" : format("%.4f @ %.1f", at->loss, at->train_s));
    }
    curves.push_back(line);
  }
  if (steps.empty()) return;
  std::printf("\nheld-out loss @ training seconds (the steps' own time, evaluations left out)\n");
  print_columns(curves);
}

// The speed suites' table (and the ZenFlow sweep's, as the reference prints it).
void print_speed_tables(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                        const Recommendation &rec) {
  bool trials = o.trials > 1;
  std::vector<std::vector<std::string>> table{{"config", "status", "step ms", "tokens/s", "GPU peak", "GPU end",
                                               "host RSS", "pinned", "estimate", "message"}};
  const bool floors = bench::has_floor(o.suite);  // the floor and the step over it, after "step ms"
  if (floors) table[0].insert(table[0].begin() + 3, {"floor ms", "/ floor"});
  if (trials) table[0].insert(table[0].begin() + 1, "trial");
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowResult &r = rows[i];
    bool ok = r.status == "ok";
    table.push_back({(rec.picks(rows, i) ? "* " : "  ") + r.row.name, r.status,
                     ok ? format("%.1f", r.mean_step_ms) : "-", ok ? format("%.0f", r.tokens_per_s) : "-",
                     bytes_text(r.gpu_peak), bytes_text(r.gpu_allocated_end), bytes_text(r.host_rss),
                     bytes_text(r.pinned_peak), bytes_text(r.estimate), rec.reasons[i]});
    if (floors) {
      bool floor = ok && r.floor_ms > 0;
      table.back().insert(table.back().begin() + 3, {floor ? format("%.1f", r.floor_ms) : "-",
                                                     floor ? format("%.2f", r.step_over_floor()) : "-"});
    }
    if (trials) table.back().insert(table.back().begin() + 1, std::to_string(r.trial));
  }
  std::printf("zfcore bench %s: %s, %d rank%s, %lld timed steps after %lld warm-up step%s%s%s\n", o.suite.c_str(),
              o.device.c_str(), o.ranks, o.ranks == 1 ? "" : "s", (long long)o.num_steps, (long long)o.warmup_steps,
              o.warmup_steps == 1 ? "" : "s", trials ? format(", %d trials each", o.trials).c_str() : "",
              warmup_note(o, rows).c_str());
  std::printf("(%s)\n", noise_note(o.trials).c_str());
  print_columns(table);
  if (floors) std::printf("%s\n", bench::floor_note(o, report.rates).c_str());
  if (o.suite == "zenflow") {  // the reference benchmark's table
    std::vector<std::vector<std::string>> sweep{{"trial", "topk_ratio", "update_interval", "overlap_step", "pin_memory",
                                                 "avg_step (ms)", "avg_bwd (ms)", "avg_fwd (ms)",
                                                 "avg_selective_optimizer_step (ms)"}};
    for (const RowResult &r : rows) {
      std::vector<std::string> line{std::to_string(r.trial)};
      for (const auto &[name, value] : r.row.labels) line.push_back(value);
      bool ok = r.status == "ok";
      for (double ms : {r.mean_step_ms, r.bwd_ms, r.fwd_ms, r.selective_step_ms})
        line.push_back(ok ? format("%.3f", ms) : r.status);
      sweep.push_back(line);
    }
    std::printf("\n");
    print_columns(sweep);
  }
}

}  // namespace

std::string warmup_note(const SuiteOptions &o, const std::vector<RowResult> &rows) {
  std::vector<std::string> longer;
  int64_t most = o.warmup_steps;
  for (const RowResult &r : rows)
    if (r.warmup_steps > o.warmup_steps && std::find(longer.begin(), longer.end(), r.row.name) == longer.end()) {
      longer.push_back(r.row.name);
      most = std::max(most, r.warmup_steps);
    }
  if (longer.empty()) return "";
  std::string names;
  for (const std::string &name : longer) names += (names.empty() ? "" : ", ") + name;
  return format("; %s: %lld (offload.ratio = \"auto\" chooses its split from step 1 and moves it onto the GPU in "
                "the two steps after: left out)", names.c_str(), (long long)most);
}

std::string recommended_path(const SuiteOptions &o) { return o.output_dir + "/recommended-" + o.suite + ".toml"; }

std::string recommended_toml(const std::string &base_file, const std::vector<std::string> &overrides,
                             const std::string &header) {
  toml::table root = toml::parse_file(base_file);
  for (const std::string &item : overrides) {
    size_t dot = item.find('.'), equals = item.find('=');
    std::string table = item.substr(0, dot), key = item.substr(dot + 1, equals - dot - 1);
    std::string text = item.substr(equals + 1);
    if (!root.contains(table)) root.insert(table, toml::table{});
    toml::table &target = *root[table].as_table();
    if (key == "plugin" || (table == "run" && key == "plugin_path")) {  // a name or a list of names
      std::vector<std::string> names = name_list(text, Location{"--set", 0, 0, item});
      if (names.size() == 1) {
        target.insert_or_assign(key, names[0]);
      } else {
        toml::array list;
        for (const std::string &name : names) list.push_back(name);
        target.insert_or_assign(key, list);
      }
      continue;
    }
    toml::table parsed;
    try {
      parsed = toml::parse("v = " + text);
    } catch (const toml::parse_error &) {
    }
    const toml::node *node = parsed.get("v");
    // As `--set` reads them: a TOML scalar, else the text itself.
    if (!node || node->is_array() || node->is_table()) target.insert_or_assign(key, text);
    else if (node->is_integer()) target.insert_or_assign(key, node->as_integer()->get());
    else if (node->is_floating_point()) target.insert_or_assign(key, node->as_floating_point()->get());
    else if (node->is_boolean()) target.insert_or_assign(key, node->as_boolean()->get());
    else target.insert_or_assign(key, text);
  }
  return header + toml_text(root);
}

void write_suite_outputs(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                         const Recommendation &rec) {
  write_text(report.stem + ".json", json_text(o, report, rows, rec));
  write_text(report.stem + ".csv", csv_text(o, rows, rec));
  write_text(report.stem + ".html", suite_html(o, report, rows, rec));
  if (rec.chosen < 0) return;
  const RowResult &best = rows[size_t(rec.chosen)];
  std::string header = format(
      "# zfcore bench %s recommends '%s': %s.\n# Measured: %s.json. Base: %s, with these overrides written in:\n",
      o.suite.c_str(), best.row.name.c_str(), rec.reasons[size_t(rec.chosen)].c_str(), report.stem.c_str(),
      report.base_config.c_str());
  std::vector<std::string> overrides = config_overrides(report, best.row);
  for (const std::string &item : overrides) header += "#   " + item + "\n";
  write_text(recommended_path(o), recommended_toml(report.base_config, overrides, header));
}

void print_suite_table(const SuiteOptions &o, const SuiteReport &report, const std::vector<RowResult> &rows,
                       const Recommendation &rec) {
  if (o.suite == "convergence") {
    print_convergence_tables(o, report, rows, rec);
  } else if (o.suite == "scale") {
    print_scale_table(o, report, rows);
  } else {
    print_speed_tables(o, report, rows, rec);
  }
  if (rec.chosen >= 0)
    std::printf("\nrecommended: %s (%s)\n", rows[size_t(rec.chosen)].row.name.c_str(), rec.reasons[size_t(rec.chosen)].c_str());
  else
    std::printf("\nno configuration ran and %s: nothing to recommend\n",
                o.suite == "convergence" ? "reached the target" : "fit");
}

}  // namespace zf
