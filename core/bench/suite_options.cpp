// suite_options.cpp: the flags of `zfcore bench stages | offload | zenflow | binding | convergence`
// and the tables that turn them into rows. A row is a list of `--set` overrides: adding a strategy
// is adding an entry here, or (convergence) a `--rows NAME:table.key=value,...` spec.
#include "bench/suite.hpp"

#include "bench/bench_flags.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/device.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>

namespace zf {
namespace {

using bench::one_of;
using bench::parse_int;

const char *kSuiteUsage =
    "usage: zfcore bench stages|offload|zenflow|binding|convergence|scale [options]\n"
    "common options:\n"
    "  --model M             preset name (gpt2, qwen2.5-1.5b, ...), Hugging Face directory (config.json)\n"
    "                        or TOML config (default: a tiny GPT on CPU, gpt2 on a GPU)\n"
    "  --batch-size N        samples per micro-batch per rank (default: the config's; 4 for a preset)\n"
    "  --seq-length N        tokens per sample (default: the config's; 512 for a preset)\n"
    "  --num-steps N         timed steps per configuration (default 20; one untimed cool-down step\n"
    "                        follows them)\n"
    "  --warmup-steps N      steps run first and left out of the figures (default 5)\n"
    "  --grad-accum N        micro-batches per optimizer step (default: the config's)\n"
    "  --output-dir D        where the JSON, CSV, logs and recommended-<suite>.toml go (default\n"
    "                        results)\n"
    "  --gpus N              ranks per configuration, under mpirun when N > 1 (default 1)\n"
    "  --device cpu|cuda     default cuda when a GPU is present, else cpu\n"
    "  --set table.key=V     added to every configuration (repeatable)\n"
    "  --timeout S           seconds one configuration may run (default 1800)\n"
    "  --trials N            run each configuration N times, in turns, a row per trial; the verdict\n"
    "                        compares medians (means of 2) and calls differences within the trials'\n"
    "                        spread \"within noise\" (default 1: no noise estimate; 3 gives one)\n"
    "stages:   --stages 0 1 2 3\n"
    "offload:  --strategies none cpu_optimizer cpu_optimizer_auto cpu_full nvme   --nvme-path DIR\n"
    "                        (adds nvme); on a GPU the default adds cpu_optimizer_auto (offload.ratio\n"
    "                        = auto: the GPU memory left keeps part of the optimizer state)\n"
    "zenflow:  --topk-ratios 0.05 0.1 0.2  --update-intervals 2 4 8  --overlap-steps true\n"
    "          --pin-memory-opts true\n"
    "binding:  --strategies zero_offload zenflow  --bindings unbound inside launch\n"
    "scale:    ZeRO-3 + offload rows on a large model (--model qwen2.5-14b), activation checkpointing on\n"
    "          --strategies zero3_cpu_optimizer zero3_cpu_optimizer_auto zero3_zenflow\n"
    "          --peak-tflops X    the GPU's dense bf16 peak for the MFU (default: from its name, H100/H200\n"
    "                             SXM 989)\n"
    "convergence: the held-out loss over training time of each row on the same model, data and\n"
    "          schedule; the first row is the reference, the first to its final loss is recommended\n"
    "          --rows none cpu_optimizer zenflow   a named row (none, cpu_optimizer,\n"
    "                        cpu_optimizer_auto, cpu_full, nvme,\n"
    "                        zenflow, zenflow_auto; on a GPU the default adds zenflow_auto and\n"
    "                        cpu_optimizer_auto), or\n"
    "                        NAME:ITEM,ITEM,... where an ITEM is a table.key=value\n"
    "                        override or a named row: \"zf-u1:zenflow,zenflow.update_interval=1\";\n"
    "                        steps_factor=F trains that row F times --num-steps\n"
    "          --num-steps N          training steps per row (default: the config's train.steps)\n"
    "          --steps-factor F       the rows after the first train F times --num-steps (default 1):\n"
    "                                 how much longer each needs to reach the first row's loss\n"
    "          --eval-every N         held-out evaluation every N steps (default: the config's\n"
    "                                 train.eval_every, else num-steps / 10)\n"
    "          --target-loss X        the held-out loss to reach (default: the first row's final;\n"
    "                                 with --trials, the highest of its trials' finals)\n"
    "          --target-tolerance X   a row reaches the target within this fraction of it (default 0;\n"
    "                                 one trial of the first row measures no spread: 0.005 states one)\n"
    "          --nvme-path DIR        directory for the nvme row\n";

// The strategies, as overrides. {optimizer} is the device's own optimizer (gpu_adam on cuda,
// cpu_adam on cpu), {nvme_path} the --nvme-path.
const std::vector<std::pair<std::string, std::vector<std::string>>> &offload_table() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"none", {"offload.plugin=none", "optimizer.plugin={optimizer}"}},
      {"cpu_optimizer", {"offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam"}},
      {"cpu_optimizer_auto", {"offload.plugin=cpu_optimizer", "offload.ratio=auto", "optimizer.plugin=cpu_adam"}},
      {"cpu_full", {"offload.plugin=cpu_full", "optimizer.plugin=cpu_adam"}},
      {"nvme", {"offload.plugin=nvme", "offload.path={nvme_path}", "optimizer.plugin=cpu_adam"}},
  };
  return table;
}

// The binding study's two workloads and three ways to place their threads.
const std::vector<std::pair<std::string, std::vector<std::string>>> &binding_workloads() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"zero_offload", {"offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam"}},
      {"zenflow",
       {"offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam", "zenflow.topk_ratio=0.1",
        "zenflow.update_interval=4", "zenflow.overlap_step=true", "offload.pin_memory=true"}},
  };
  return table;
}
const std::vector<std::pair<std::string, std::vector<std::string>>> &binding_modes() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"unbound", {"run.bind_cores=false"}},
      {"inside", {"run.bind_cores=true"}},   // the engine binds its own threads (the default)
      {"launch", {"run.bind_cores=false"}},  // every rank started on its share of the cores
  };
  return table;
}

// The scale suite's rows: ZeRO-3 with the optimizer on the host, then with the GPU memory left
// keeping part of it (offload.ratio = auto), then ZenFlow choosing its columns from that memory.
const std::vector<std::pair<std::string, std::vector<std::string>>> &scale_table() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = {
      {"zero3_cpu_optimizer", {"stage.plugin=zero3", "offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam"}},
      {"zero3_cpu_optimizer_auto",
       {"stage.plugin=zero3", "offload.plugin=cpu_optimizer", "offload.ratio=auto", "optimizer.plugin=cpu_adam"}},
      {"zero3_zenflow",
       {"stage.plugin=zero3", "offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam", "zenflow.topk_ratio=auto",
        "zenflow.update_interval=4", "zenflow.overlap_step=true", "offload.pin_memory=true"}},
  };
  return table;
}

// convergence's named rows: the offload strategies and the reference's ZenFlow settings.
const std::vector<std::pair<std::string, std::vector<std::string>>> &convergence_table() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> table = [] {
    auto rows = offload_table();
    rows.push_back(binding_workloads()[1]);  // zenflow: topk 0.1, update interval 4, overlap
    std::vector<std::string> automatic = rows.back().second;  // zenflow_auto: topk_ratio from the GPU memory left
    std::replace(automatic.begin(), automatic.end(), std::string("zenflow.topk_ratio=0.1"),
                 std::string("zenflow.topk_ratio=auto"));
    rows.emplace_back("zenflow_auto", automatic);
    return rows;
  }();
  return table;
}

std::string substitute(std::string text, const std::map<std::string, std::string> &values) {
  for (const auto &[name, value] : values) {
    std::string key = "{" + name + "}";
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  }
  return text;
}

// The value as written: it becomes a --set override.
std::string parse_real(const std::string &flag, const std::string &text, double min, double max) {
  bench::parse_number(flag, text, min, max);
  return text;
}

std::string parse_bool(const std::string &flag, const std::string &text) {
  if (text == "true" || text == "1" || text == "True") return "true";
  if (text == "false" || text == "0" || text == "False") return "false";
  throw UsageError(format("%s %s: expected true or false (or 1 or 0)", flag.c_str(), text.c_str()));
}

template <class Table>
std::vector<std::string> names_of(const Table &table) {
  std::vector<std::string> names;
  for (const auto &entry : table) names.push_back(entry.first);
  return names;
}

template <class Table>
const std::vector<std::string> &overrides_of(const Table &table, const std::string &name) {
  for (const auto &entry : table)
    if (entry.first == name) return entry.second;
  throw UsageError("no strategy '" + name + "'");
}

// Where `name` is in the table: its strategies are listed from the simplest.
template <class Table>
int index_of(const Table &table, const std::string &name) {
  for (size_t i = 0; i < table.size(); ++i)
    if (table[i].first == name) return int(i);
  return int(table.size());
}

// A `--rows` spec: a named row, or NAME:ITEM,ITEM,... where an item is a `table.key=value`
// override or a named row that stands for its overrides.
SuiteRow convergence_row(const std::string &spec, const std::map<std::string, std::string> &values) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::string problem = entry_name_problem(name);
  if (!problem.empty() ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != std::string::npos)
    throw UsageError("--rows " + spec + ": a row's name is letters, digits, '.', '_' or '-', and not '.' or '..' "
                     "(it names its run directory), followed by ':' and its overrides" +
                     (problem.empty() ? "" : "; \"" + name + "\" " + problem));
  std::vector<std::string> items;
  if (colon == std::string::npos) items.push_back(name);
  std::stringstream list(colon == std::string::npos ? "" : spec.substr(colon + 1));
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) items.push_back(item);
  if (items.empty()) throw UsageError("--rows " + spec + ": no overrides after ':' (expected table.key=value,...)");
  SuiteRow row{name, {}, false, {}};
  for (const std::string &item : items) {
    const size_t equals = item.find('=');
    if (item.rfind("steps_factor=", 0) == 0) {
      row.steps_factor = bench::parse_number("--rows " + spec + ": steps_factor", item.substr(equals + 1), 0, 100);
      continue;
    }
    if (equals != std::string::npos && item.find('.') < equals) {
      row.overrides.push_back(item);
      continue;
    }
    const std::vector<std::string> names = names_of(convergence_table());
    if (equals != std::string::npos || std::find(names.begin(), names.end(), item) == names.end()) {
      std::string known;
      for (const std::string &n : names) known += (known.empty() ? "" : ", ") + n;
      throw UsageError(format("--rows %s: '%s' is neither a table.key=value override, steps_factor=F nor a named row (%s)",
                              spec.c_str(), item.c_str(), known.c_str()));
    }
    if (item == "nvme" && values.at("nvme_path").empty())
      throw UsageError("--rows " + spec + ": the nvme row needs --nvme-path DIR (a directory on the NVMe drive)");
    for (const std::string &o : overrides_of(convergence_table(), item)) row.overrides.push_back(substitute(o, values));
  }
  return row;
}

// The rows of each suite from the swept values.
struct Sweep {
  std::vector<std::string> stages{"0", "1", "2", "3"};
  std::vector<std::string> strategies;
  std::string nvme_path;
  std::vector<std::string> topk{"0.05", "0.1", "0.2"}, intervals{"2", "4", "8"}, overlap{"true"}, pin{"true"};
  std::vector<std::string> bindings{"unbound", "inside", "launch"};
  std::vector<std::string> convergence_rows;  // default: none, cpu_optimizer, zenflow (+ the auto rows on a GPU)
};

std::vector<SuiteRow> build_rows(const std::string &suite, const Sweep &sweep, const std::string &device) {
  std::map<std::string, std::string> values{{"optimizer", device == "cuda" ? "gpu_adam" : "cpu_adam"},
                                            {"nvme_path", sweep.nvme_path}};
  std::vector<SuiteRow> rows;
  if (suite == "stages") {
    for (const std::string &stage : sweep.stages)
      rows.push_back({"zero" + stage, {"stage.plugin=zero" + stage}, false, {}, std::stoi(stage)});
  } else if (suite == "offload") {
    std::vector<std::string> strategies = sweep.strategies;
    if (strategies.empty()) strategies = {"none", "cpu_optimizer", "cpu_full"};
    if (sweep.strategies.empty() && device == "cuda")  // on a CPU run the same as cpu_optimizer
      strategies.insert(strategies.begin() + 2, "cpu_optimizer_auto");
    if (sweep.strategies.empty() && !sweep.nvme_path.empty()) strategies.push_back("nvme");
    for (const std::string &name : strategies) {
      if (name == "nvme" && sweep.nvme_path.empty())
        throw UsageError("--strategies nvme needs --nvme-path DIR (a directory on the NVMe drive)");
      SuiteRow row{name, {}, false, {}, index_of(offload_table(), name)};
      for (const std::string &o : overrides_of(offload_table(), name)) row.overrides.push_back(substitute(o, values));
      rows.push_back(row);
    }
  } else if (suite == "zenflow") {
    for (const std::string &topk : sweep.topk)
      for (const std::string &interval : sweep.intervals)
        for (const std::string &overlap : sweep.overlap)
          for (const std::string &pin : sweep.pin) {
            SuiteRow row;
            row.name = format("topk%s-u%s%s%s", topk.c_str(), interval.c_str(), overlap == "true" ? "-overlap" : "",
                              pin == "true" ? "-pin" : "");
            row.overrides = {"offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam", "zenflow.topk_ratio=" + topk,
                             "zenflow.update_interval=" + interval, "zenflow.overlap_step=" + overlap,
                             "offload.pin_memory=" + pin};
            row.labels = {{"topk_ratio", topk}, {"update_interval", interval}, {"overlap_step", overlap},
                          {"pin_memory", pin}};
            rows.push_back(row);
          }
  } else if (suite == "convergence") {
    std::vector<std::string> specs = sweep.convergence_rows;
    if (specs.empty()) specs = {"none", "cpu_optimizer", "zenflow"};
    if (sweep.convergence_rows.empty() && device == "cuda")  // on a CPU run the same as zenflow, cpu_optimizer
      specs.insert(specs.end(), {"zenflow_auto", "cpu_optimizer_auto"});
    for (const std::string &spec : specs) {
      rows.push_back(convergence_row(spec, values));
      for (size_t i = 0; i + 1 < rows.size(); ++i)
        if (rows[i].name == rows.back().name)
          throw UsageError("--rows: two rows named '" + rows.back().name + "' (each names its run directory)");
    }
  } else if (suite == "scale") {
    std::vector<std::string> names = sweep.strategies.empty() ? names_of(scale_table()) : sweep.strategies;
    for (const std::string &name : names)
      rows.push_back({name, overrides_of(scale_table(), name), false, {}, index_of(scale_table(), name)});
  } else {  // binding
    std::vector<std::string> workloads = sweep.strategies;
    if (workloads.empty()) workloads = names_of(binding_workloads());
    for (const std::string &workload : workloads)
      for (const std::string &mode : sweep.bindings) {
        SuiteRow row{workload + "-" + mode, overrides_of(binding_workloads(), workload), mode == "launch", {},
                     index_of(binding_modes(), mode)};
        for (const std::string &o : overrides_of(binding_modes(), mode)) row.overrides.push_back(o);
        row.labels = {{"workload", workload}, {"binding", mode}};
        rows.push_back(row);
      }
  }
  return rows;
}

}  // namespace

SuiteOptions parse_suite_options(const std::string &suite, const std::vector<std::string> &args) {
  SuiteOptions o;
  o.suite = suite;
  Sweep sweep;
  bool num_steps_given = false;
  // Flags take one value, or (the sweeps) every value up to the next flag.
  auto values_after = [&](size_t &i) {
    std::vector<std::string> values;
    while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) values.push_back(args[++i]);
    if (values.empty()) throw UsageError(args[i] + " needs a value\n" + kSuiteUsage);
    return values;
  };
  auto value_after = [&](size_t &i) {
    if (i + 1 >= args.size()) throw UsageError(args[i] + " needs a value\n" + kSuiteUsage);
    return args[++i];
  };
  auto only_for = [&](const std::string &flag, std::initializer_list<const char *> suites) {
    for (const char *s : suites)
      if (suite == s) return;
    throw UsageError(format("%s is not an option of `zfcore bench %s`\n%s", flag.c_str(), suite.c_str(), kSuiteUsage));
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kSuiteUsage, stdout);
      std::exit(0);
    } else if (flag == "--model") {
      o.model = value_after(i);
    } else if (flag == "--batch-size") {
      o.batch_size = parse_int(flag, value_after(i), 1);
    } else if (flag == "--seq-length") {
      o.seq_length = parse_int(flag, value_after(i), 1);
    } else if (flag == "--num-steps") {
      o.num_steps = parse_int(flag, value_after(i), 1);
      num_steps_given = true;
    } else if (flag == "--warmup-steps") {
      o.warmup_steps = parse_int(flag, value_after(i), 0);
    } else if (flag == "--grad-accum") {
      o.grad_accum = parse_int(flag, value_after(i), 1);
    } else if (flag == "--output-dir") {
      o.output_dir = value_after(i);
    } else if (flag == "--gpus") {
      o.ranks = int(parse_int(flag, value_after(i), 1));
    } else if (flag == "--device") {
      o.device = one_of(flag, value_after(i), {"cpu", "cuda"});
    } else if (flag == "--timeout") {
      o.timeout_s = double(parse_int(flag, value_after(i), 1));
    } else if (flag == "--trials") {
      o.trials = int(parse_int(flag, value_after(i), 1, 1000));
    } else if (flag == "--set") {
      std::string item = value_after(i);
      if (item.find('=') == std::string::npos || item.find('.') > item.find('='))
        throw UsageError("--set " + item + ": expected table.key=value");
      o.extra.push_back(item);
    } else if (flag == "--stages") {
      only_for(flag, {"stages"});
      sweep.stages.clear();
      for (const std::string &v : values_after(i))
        sweep.stages.push_back(one_of(flag, v, {"0", "1", "2", "3"}));
    } else if (flag == "--strategies") {
      only_for(flag, {"offload", "binding", "scale"});
      auto names = suite == "offload" ? names_of(offload_table())
                   : suite == "scale" ? names_of(scale_table())
                                      : names_of(binding_workloads());
      for (const std::string &v : values_after(i)) sweep.strategies.push_back(one_of(flag, v, names));
    } else if (flag == "--nvme-path") {
      only_for(flag, {"offload", "convergence"});
      sweep.nvme_path = value_after(i);
    } else if (flag == "--topk-ratios") {
      only_for(flag, {"zenflow"});
      sweep.topk.clear();
      for (const std::string &v : values_after(i)) sweep.topk.push_back(parse_real(flag, v, 0, 1));
    } else if (flag == "--update-intervals") {
      only_for(flag, {"zenflow"});
      sweep.intervals.clear();
      for (const std::string &v : values_after(i)) sweep.intervals.push_back(std::to_string(parse_int(flag, v, 1)));
    } else if (flag == "--overlap-steps") {
      only_for(flag, {"zenflow"});
      sweep.overlap.clear();
      for (const std::string &v : values_after(i)) sweep.overlap.push_back(parse_bool(flag, v));
    } else if (flag == "--pin-memory-opts") {
      only_for(flag, {"zenflow"});
      sweep.pin.clear();
      for (const std::string &v : values_after(i)) sweep.pin.push_back(parse_bool(flag, v));
    } else if (flag == "--bindings") {
      only_for(flag, {"binding"});
      sweep.bindings.clear();
      for (const std::string &v : values_after(i)) sweep.bindings.push_back(one_of(flag, v, names_of(binding_modes())));
    } else if (flag == "--rows") {
      only_for(flag, {"convergence"});
      sweep.convergence_rows = values_after(i);
    } else if (flag == "--peak-tflops") {
      only_for(flag, {"scale"});
      o.peak_tflops = bench::parse_number(flag, value_after(i), 1e-6, 1e9);
    } else if (flag == "--eval-every") {
      only_for(flag, {"convergence"});
      o.eval_every = parse_int(flag, value_after(i), 1);
    } else if (flag == "--target-loss") {
      only_for(flag, {"convergence"});
      const std::string text = value_after(i);
      o.target_loss = bench::parse_number(flag, text, 0, 1e9);
    } else if (flag == "--target-tolerance") {
      only_for(flag, {"convergence"});
      const std::string text = value_after(i);
      o.target_tolerance = text == "0" ? 0.0 : bench::parse_number(flag, text, 0, 0.5);
    } else if (flag == "--steps-factor") {
      only_for(flag, {"convergence"});
      o.steps_factor = bench::parse_number(flag, value_after(i), 0, 100);
    } else {
      throw UsageError("unknown option '" + flag + "'\n" + kSuiteUsage);
    }
  }
  if (o.device.empty()) o.device = cuda_device_count() > 0 ? "cuda" : "cpu";
  if (suite == "convergence" && !num_steps_given) o.num_steps = 0;  // the base config's train.steps
  o.rows = build_rows(suite, sweep, o.device);
  return o;
}

}  // namespace zf
