// plugin_set.hpp: the four plugins a run uses (stage, offload, optimizer, selector), chosen by
// the config. A table may list several candidates: the first that does not decline is used, and
// each decline is logged with its reason.
#pragma once

#include "config/config.hpp"
#include "plugin/plugin_advice.hpp"
#include "plugin/plugin_kinds.hpp"

#include <memory>

namespace zf {

class PluginSet {
 public:
  PluginSet(const RunConfig &config, Runtime &runtime, PluginRegistry &registry);
  StagePlugin stage;
  OffloadPlugin offload;
  OptimizerPlugin optimizer;
  SelectorPlugin selector;
  // The optimizer of the part of the shard that an offloaded update keeps where the model computes
  // (ZenFlow's selected columns, offload.ratio's device share): optimizer.device_plugin on a GPU run, a second
  // instance of the run's optimizer on a CPU run. Created on first use.
  const OptimizerPlugin &device_optimizer();
  // Advice: the installed plugins of `kind` that meet `needs`, as the setting that picks one
  // (plugin/plugin_advice.hpp). Scans the search path: for failure paths.
  std::string installed_with(zf_kind kind, const PluginNeeds &needs) const {
    return zf::installed_with(registry_, kind, needs);
  }

 private:
  const RunConfig &config_;
  Runtime &runtime_;
  PluginRegistry &registry_;
  std::unique_ptr<OptimizerPlugin> device_optimizer_;
};

// The candidates of `section` to try on this machine, in order. A name that some zfcore build has
// but this one does not (known_plugins.hpp: gpu_adam without CUDA) is left out, with a note in
// `skipped`, as a plugin that declines is; a name no build has stays (resolving it is an error that
// names the nearest). Throws when every name is left out. `zfcore validate` and a run share it.
std::vector<std::string> candidates_here(const PluginSection &section, const PluginRegistry &registry,
                                         std::vector<std::string> *skipped);

// Every plugin table's candidates resolved and their parameters validated, without creating any
// plugin; the notes of candidates_here in `skipped`. `zfcore validate` and a run share it.
void check_plugin_tables(const RunConfig &config, PluginRegistry &registry, std::vector<std::string> *skipped);

// Resolves and validates a plugin table without creating the plugin (`zfcore validate`).
const PluginFile &resolve_plugin(const PluginSection &section, const std::string &name, PluginRegistry &registry,
                                 std::unique_ptr<PluginConfig> *config_out);

}  // namespace zf
