// plugin_advice.hpp: advice that names the installed plugins able to do what a refused one cannot,
// told from each plugin file alone (its descriptor's ZF_CAP_* bits and the entries its table
// wires), without creating any plugin: third-party plugins appear in it, and a built-in that is
// not installed does not.
#pragma once

#include <zf/zf_plugin.h>

#include <cstdint>
#include <string>

namespace zf {

class PluginRegistry;

// Properties a plugin's function table shows, beside its capability bits.
enum PluginTrait : uint32_t {
  // optimizer: wires state_spec and bind_state (ABI 1.3), so the host may hold its state.
  kHostHeldState = 1u << 0,
  // offload: wires gradients_out and parameters_in, which an offload that takes the master weights
  // away from where the model computes needs.
  kMovesData = 1u << 1,
  // offload: with its defaults, keeps the working parameters in host memory (cpu_full), as its
  // estimate_memory says (memory_entry.hpp: params_on_host).
  kParamsOnHost = 1u << 2,
};

// What advice asks of a plugin.
struct PluginNeeds {
  uint64_t capabilities = 0;     // every ZF_CAP_* bit here
  uint32_t traits = 0;           // every PluginTrait here
  const char *except = nullptr;  // not the plugin of this name (the refused one)
  uint32_t without = 0;          // none of these PluginTrait bits
};

// The PluginTrait bits a plugin's table shows.
uint32_t plugin_traits(const zf_descriptor &descriptor);

// The installed plugins of `kind` (the first loadable file of each name in the search path) that
// meet `needs`, as the setting that picks one: `KIND.plugin = "a", "b" or "c"`, sorted; or a text
// that says none is installed. Loads every plugin file of the search path: for failure paths.
std::string installed_with(PluginRegistry &registry, zf_kind kind, const PluginNeeds &needs);

}  // namespace zf
