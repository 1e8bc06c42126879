// memory_entry.hpp: asks a stage or offload plugin (ABI 1.7) or an optimizer (ABI 1.9) for its
// memory (estimate_memory),
// without creating it: `zfcore estimate`, the memory plan and the refusal's advice all come here.
// A plugin without the entry (an older ABI) or that declines gives "no estimate", never an error.
#pragma once

#include "config/plugin_config.hpp"
#include "plugin/plugin_registry.hpp"

#include <string>

namespace zf {

struct PluginMemory {
  bool estimated = false;
  std::string why;           // when not estimated: the reason, for the user
  zf_memory_estimate bytes;  // when estimated
};

// The plugin's estimate_memory entry, or NULL (not wired, or a table older than ABI 1.7).
zf_estimate_memory_fn memory_entry(const PluginFile &file);

// Calls the entry with `shape` (its config and getters are set here, from `config`).
PluginMemory ask_plugin_memory(const PluginFile &file, const PluginConfig &config, zf_memory_shape shape);

// Whether an offload plugin, with `config`, keeps the working parameters in host memory (its plan's
// param_tier off the model's: cpu_full, nvme with offload_params). The plan says so only once the
// plugin is created on a device; its estimate_memory says it before: given a stage that holds the
// working parameters alone, it moves some of them to a host tier. False without an estimate.
bool params_on_host(const PluginFile &offload, const PluginConfig &config);

}  // namespace zf
