// known_plugins.hpp: the plugins some zfcore build ships (plugins/KIND/NAME/), whether or not this
// build has them: gpu_adam exists only in CUDA builds. A fallback list
// (`optimizer.plugin = ["gpu_adam", "cpu_adam"]`) skips a known name that is not installed here, as
// it skips a plugin that declines, while a name no build has stays an error (a typo). A test
// checks the list against the zf_add_plugin calls of plugins/.
#pragma once

#include <zf/zf_plugin.h>

#include <string>
#include <vector>

namespace zf {

class PluginRegistry;

struct KnownPlugin {
  zf_kind kind;
  const char *name;
  const char *built;  // which builds have it ("every build", "CUDA builds", ...)
};

const std::vector<KnownPlugin> &known_plugins();
// The entry of kind/name, or nullptr for a name no zfcore build has.
const KnownPlugin *known_plugin(zf_kind kind, const std::string &name);

// Whether zf-KIND-NAME.so is in the registry's search path (not loaded: it may still be rejected).
bool installed(const PluginRegistry &registry, zf_kind kind, const std::string &name);

}  // namespace zf
