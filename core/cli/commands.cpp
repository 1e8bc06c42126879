#include "cli/commands.hpp"

#include "config/limits.hpp"
#include "engine/engine.hpp"
#include "engine/evaluate.hpp"
#include "engine/run_options.hpp"
#include "engine/setup_checks.hpp"
#include "plugin/plugin_set.hpp"
#include "plugin/memory_entry.hpp"
#include "plugin/plugin_entry.hpp"
#include "plugin/known_plugins.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/log.hpp"
#include "runtime/runtime.hpp"
#include "runtime/affinity.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"

#if __has_include("bench/bench.hpp")
#include "bench/bench.hpp"
#define ZF_HAVE_BENCH 1
#endif


#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

namespace zf {
namespace {

std::string capabilities_text(uint64_t caps) {
  const std::pair<uint64_t, const char *> names[] = {
      {ZF_CAP_CPU, "cpu"}, {ZF_CAP_CUDA, "cuda"}, {ZF_CAP_ASYNC, "async"}, {ZF_CAP_LOW_PRECISION_OUT, "lowp-out"},
      {ZF_CAP_SHARD_OPTIMIZER, "shard-optimizer"}, {ZF_CAP_SHARD_GRADIENTS, "shard-grads"},
      {ZF_CAP_SHARD_PARAMETERS, "shard-params"}, {ZF_CAP_NVME, "nvme"}, {ZF_CAP_SCORES, "scores"}};
  std::string text;
  for (const auto &[bit, name] : names)
    if (caps & bit) text += (text.empty() ? "" : ",") + std::string(name);
  return text;
}

}  // namespace

RunArgs parse_run_args(const std::vector<std::string> &args, const char *command) {
  RunArgs out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--set" || arg == "--unset") {
      if (i + 1 >= args.size()) throw UsageError(arg + (arg == "--set" ? " needs table.key=value" : " needs table.key"));
      const std::string &value = args[++i];
      bool has_value = value.find('=') != std::string::npos;
      // `--set optimizer.lr 0`: the value went into a word of its own.
      bool next_is_value = i + 1 < args.size() && args[i + 1].rfind("-", 0) != 0 &&
                           args[i + 1].find(".toml") == std::string::npos;
      if (arg == "--set" && !has_value && next_is_value)
        throw UsageError(format("--set %s %s: write the key and its value as one word: --set %s=%s", value.c_str(),
                                args[i + 1].c_str(), value.c_str(), args[i + 1].c_str()));
      if (arg == "--set" && !has_value)
        throw UsageError(format("--set %s: expected --set table.key=value", value.c_str()));
      (arg == "--set" ? out.overrides : out.unsets).push_back(value);
    } else if (arg.rfind("--set=", 0) == 0) {
      out.overrides.push_back(arg.substr(6));
    } else if (arg.rfind("--unset=", 0) == 0) {
      out.unsets.push_back(arg.substr(8));
    } else if (arg == "--verbose" && std::string(command) == "run") {
      out.verbose = true;
    } else if (!arg.empty() && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "' (zfcore " + command + " --help lists them)");
    } else if (out.file.empty()) {
      out.file = arg;
    } else {
      throw UsageError("one config file only (got '" + out.file + "' and '" + arg + "')");
    }
  }
  if (out.file.empty())
    throw UsageError(format("missing the config file, e.g. zfcore %s examples/quickstart.toml", command));
  return out;
}

void print_config_notes(const RunConfig &config, const std::string &run_dir) {
  if (config.notes().empty()) return;
  std::error_code ec;
  if (!run_dir.empty() && std::filesystem::exists(run_dir + "/steps.jsonl", ec)) {
    std::printf("zfcore: %zu notes on the DeepSpeed keys, printed at the first run in %s (--verbose prints them "
                "again; zfcore convert %s lists them)\n", config.notes().size(), run_dir.c_str(),
                config.file().substr(0, config.file().find(" (as `zfcore convert")).c_str());
    std::fflush(stdout);
    return;
  }
  std::printf("zfcore: DeepSpeed keys without a zfcore key of their own, or whose value differs from DeepSpeed's:\n");
  for (const std::string &note : config.notes()) std::printf("  %s\n", note.c_str());
  std::fflush(stdout);
}

int command_version() {
  std::printf("zfcore %s (plugin ABI %d.%d)\n", ZF_VERSION, ZF_ABI_MAJOR, ZF_ABI_MINOR);
  return 0;
}

namespace {

// Runs `body` on this rank of the job (MPI under mpirun) with the config, checked alike on every
// rank. An error on one rank ends them all: peers may be waiting in a collective, and the
// communicator's destructor would wait for them.
int on_every_rank(const RunArgs &run, const std::function<int(const RunConfig &, Runtime &)> &body) {
  auto runtime = std::make_unique<Runtime>();
  runtime->comm = make_cpu_communicator();
  report_fatal_signals();  // after MPI started: its own handlers would replace these
  log_set_rank(runtime->comm->rank(), runtime->comm->world_size());
  runtime->worker_cores = allowed_cores();
  try {
    RunConfig config = run.text.empty() ? RunConfig::load(run.file, run.overrides, run.unsets)
                                        : RunConfig::from_file_text(run.text, run.file, run.overrides, run.unsets);
    config.apply_global_batch(runtime->comm->world_size());
    if (runtime->comm->rank() == 0) print_config_notes(config, run.verbose ? "" : RunOptions::read(config).output_dir);
    check_same_config_on_all_ranks(config, *runtime->comm);
    check_run_limits(config, runtime->comm->world_size());
    if (config.real("run", "comm_timeout_s") > 0) runtime->comm->set_timeout_s(config.real("run", "comm_timeout_s"));
    return body(config, *runtime);
  } catch (const std::exception &error) {
    if (runtime->comm->world_size() > 1) {
      log_error(error_message(error));
      runtime->comm->abort(1);
    }
    throw;
  }
}

}  // namespace

int command_run(const std::vector<std::string> &args, bool export_only) {
  return command_run(parse_run_args(args, export_only ? "export" : "run"), export_only);
}

int command_run(const RunArgs &run, bool export_only) {
  return on_every_rank(run, [export_only](const RunConfig &config, Runtime &runtime) {
    PluginRegistry registry(PluginRegistry::default_search_path(config.plugin_path()));
    std::vector<std::string> notes;  // what `zfcore validate` checks, first and alike (setup_checks.hpp)
    check_before_setup(config, registry, &notes, export_only);
    if (runtime.comm->rank() == 0)
      for (const std::string &note : notes) log_warn(note);
    RunSummary summary = train(config, runtime, registry, export_only);
    if (runtime.comm->rank() == 0 && summary.steps < summary.first_step) {
      std::printf("zfcore: step %lld, param_digest %s\n", (long long)summary.steps, summary.param_digest.c_str());
    } else if (runtime.comm->rank() == 0) {
      // What this run trained: after a resume that is not every step up to the last.
      const long long trained = summary.steps - summary.first_step + 1;
      std::string resumed = summary.first_step > 1 ? format(", resumed from step %lld", (long long)summary.first_step - 1) : "";
      std::printf("zfcore: trained %lld step%s (%lld-%lld%s), loss %.4f -> %.4f, mean step %.1f ms, param_digest %s\n",
                  trained, trained == 1 ? "" : "s", (long long)summary.first_step, (long long)summary.steps,
                  resumed.c_str(), summary.initial_loss, summary.final_loss, summary.mean_step_ms,
                  summary.param_digest.c_str());
      std::printf("zfcore: wrote %s/{steps.jsonl,steps.csv,summary.json,report.html}\n", summary.output_dir.c_str());
    }
    runtime.comm->barrier();
    return summary.stop_signal ? 128 + summary.stop_signal : 0;
  });
}

int command_eval(const std::vector<std::string> &args) {
  std::vector<std::string> rest;
  bool json = false;
  for (const std::string &arg : args) {
    if (arg == "--json") json = true;
    else rest.push_back(arg);
  }
  return on_every_rank(parse_run_args(rest, "eval"), [json](const RunConfig &config, Runtime &runtime) {
    EvalReport report = evaluate_config(config, runtime);
    const EvalResult &r = report.result;
    if (runtime.comm->rank() == 0 && json) {
      JsonWriter out;
      out.begin_object().key("loss").value(r.loss).key("perplexity").value(std::exp(r.loss));
      out.key("tokens").value(int64_t(r.tokens)).key("sequences").value(r.sequences);
      out.key("held_out_sequences").value(report.available_sequences).key("micro_batches").value(r.batches);
      out.key("step").value(report.step).key("weights").value(report.weights).end_object();
      std::printf("%s\n", out.str().c_str());
    } else if (runtime.comm->rank() == 0) {
      std::printf("zfcore eval: loss %.4f, perplexity %.3f over %lld tokens (%lld of %lld held-out sequences, "
                  "%lld micro-batches; train.eval_batches sets how many) from %s\n",
                  r.loss, std::exp(r.loss), (long long)r.tokens, (long long)r.sequences,
                  (long long)report.available_sequences, (long long)r.batches, report.weights.c_str());
    }
    std::fflush(stdout);
    runtime.comm->barrier();
    return 0;
  });
}

int command_validate(const std::vector<std::string> &args) {
  RunArgs run = parse_run_args(args, "validate");
  RunConfig config = RunConfig::load(run.file, run.overrides, run.unsets);
  config.apply_global_batch(0);  // the ranks of the launch are not known here
  print_config_notes(config);
  check_run_limits(config, 1);
  PluginRegistry registry(PluginRegistry::default_search_path(config.plugin_path()));
  std::vector<std::string> notes;
  check_before_setup(config, registry, &notes);  // what a run checks first, the same way
  for (const std::string &note : notes) std::printf("zfcore: %s\n", note.c_str());
  check_config_memory_plan(config);  // the plan a run checks before step 1, on this host
  std::string chosen;
  for (zf_kind kind : {ZF_KIND_STAGE, ZF_KIND_OFFLOAD, ZF_KIND_OPTIMIZER, ZF_KIND_SELECTOR}) {
    std::string names;
    for (const std::string &name : candidates_here(config.plugin(kind), registry, nullptr))
      names += (names.empty() ? "" : "|") + name;
    chosen += format("%s%s %s", chosen.empty() ? "" : ", ", kind_name(kind), names.c_str());
  }
  if (config.has_table("zenflow")) chosen += ", zenflow";
  std::printf("%s: valid (%s)\n", run.file.c_str(), chosen.c_str());
  return 0;
}

int command_plugins(const std::vector<std::string> &args) {
  bool params = false;
  for (const std::string &arg : args) {
    if (arg == "--params") params = true;
    else throw UsageError("unknown option '" + arg + "' (zfcore plugins [--params])");
  }
  PluginRegistry registry(PluginRegistry::default_search_path());
  std::printf("search path (first match wins):\n");
  for (size_t i = 0; i < registry.search_path().size(); ++i)
    std::printf("  %zu. %s%s\n", i + 1, registry.search_path()[i].c_str(), i == 0 ? " (built-in)" : "");
  std::vector<const PluginFile *> found;
  std::vector<Rejection> rejected;
  registry.scan(found, rejected);
  std::printf("\n%-10s %-14s %-8s %-4s %-28s %s\n", "KIND", "NAME", "VERSION", "ABI", "CAPABILITIES", "PATH");
  for (const PluginFile *file : found) {
    const zf_descriptor &d = *file->descriptor;
    // "estimate": the plugin reports its memory (zfcore estimate, the memory plan, the bench ask it)
    const std::string capabilities = capabilities_text(d.capabilities) + (memory_entry(*file) ? ",estimate" : "");
    std::printf("%-10s %-14s %-8s %u.%-2u %-28s %s\n", kind_name(d.kind), d.name, d.version ? d.version : "-",
                ZF_ABI_MAJOR_OF(file->abi_version), ZF_ABI_MINOR_OF(file->abi_version), capabilities.c_str(),
                file->path.c_str());
    if (params) {
      if (d.description) std::printf("    %s\n", d.description);
      for (uint32_t i = 0; i < d.param_count; ++i) std::printf("%s\n", param_text(d.params[i]).c_str());
      if (d.param_count == 0) std::printf("    (no parameters)\n");
    }
  }
  std::string absent;
  for (const KnownPlugin &known : known_plugins())
    if (!installed(registry, known.kind, known.name))
      absent += format("  %-25s (zfcore has it in %s)\n", format("%s/%s", kind_name(known.kind), known.name).c_str(),
                       known.built);
  if (!absent.empty())
    std::printf("\nknown, not installed here (a fallback list such as optimizer.plugin = [\"gpu_adam\", "
                "\"cpu_adam\"] skips them):\n%s", absent.c_str());
  if (!rejected.empty()) {
    std::printf("\nrejected:\n");
    for (const Rejection &r : rejected) std::printf("  %s: %s\n", r.path.c_str(), r.reason.c_str());
  }
  return 0;
}

int command_bench(const std::vector<std::string> &args) {
  if (args.empty()) throw UsageError("which benchmark? zfcore bench optimizer|disk|stages|offload|zenflow|binding|convergence|scale [options]");
  std::vector<std::string> rest(args.begin() + 1, args.end());
#ifdef ZF_HAVE_BENCH
  if (args[0] == "optimizer") return bench_optimizer(rest);
  if (args[0] == "disk") return bench_disk(rest);
  for (const char *suite : {"stages", "offload", "zenflow", "binding", "convergence", "scale"})
    if (args[0] == suite) return bench_suite(suite, rest);
#endif
  throw UsageError("unknown benchmark '" + args[0] + "' (available: optimizer, disk, stages, offload, zenflow, binding, convergence, scale)");
}

}  // namespace zf
