// commands.hpp: the zfcore subcommands; each returns the process exit code.
#pragma once

#include "config/config.hpp"
#include "runtime/error.hpp"

#include <zf/zf_plugin.h>

#include <exception>
#include <string>
#include <vector>

namespace zf {

// FILE [--set table.key=value]... [--unset table.key]...: the arguments of run, validate and estimate.
struct RunArgs {
  std::string file;
  std::vector<std::string> overrides;  // "table.key=value"
  std::vector<std::string> unsets;     // "table.key"
  bool verbose = false;                // --verbose (run): the DeepSpeed notes on every run
  std::string text;                    // the config itself, when not read from `file` (zfcore export)
};
// Throws UsageError for anything else, and for `--set table.key value` says to write table.key=value.
RunArgs parse_run_args(const std::vector<std::string> &args, const char *command);

int command_version();
int command_run(const std::vector<std::string> &args, bool export_only = false);  // export_only: zfcore export
int command_run(const RunArgs &run, bool export_only);
int command_eval(const std::vector<std::string> &args);
int command_validate(const std::vector<std::string> &args);
int command_plugins(const std::vector<std::string> &args);
int command_bench(const std::vector<std::string> &args);
int command_estimate(const std::vector<std::string> &args);
int command_convert(const std::vector<std::string> &args);  // convert.cpp
int command_config(const std::vector<std::string> &args);
int command_checkpoint(const std::vector<std::string> &args);  // checkpoint_command.cpp
int command_export(const std::vector<std::string> &args);      // checkpoint_command.cpp
int command_prepare(const std::vector<std::string> &args);     // prepare_command.cpp

// A DeepSpeed JSON's notes (RunConfig::notes), printed before a command that runs it starts, as
// `zfcore convert` lists them at the top of its TOML. With `run_dir`: once per run directory (a run
// that finds the reports of an earlier one there says how many notes there are instead).
void print_config_notes(const RunConfig &config, const std::string &run_dir = "");

// The run's memory plan for one rank of `config` on this host (its stage and offload as they estimate
// themselves, a micro-batch's data, a CPU run's activations): throws the run's "the memory plan does
// not fit" refusal when the host cannot hold it (estimate.cpp; zfcore validate calls it).
void check_config_memory_plan(const RunConfig &config);

// One declared parameter as a line of `zfcore plugins --params` and `zfcore config --keys`.
std::string param_text(const zf_param_decl &p);

}  // namespace zf
