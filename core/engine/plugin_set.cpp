#include "engine/plugin_set.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace zf {

const PluginFile &resolve_plugin(const PluginSection &section, const std::string &name, PluginRegistry &registry,
                                 std::unique_ptr<PluginConfig> *config_out) {
  const PluginFile *file = nullptr;
  try {
    file = &registry.find(section.kind, name);
  } catch (const Error &error) {
    throw Error(format("%s: %s.plugin = \"%s\": %s", section.where.str().c_str(), section.table.c_str(),
                       name.c_str(), error.what()));
  }
  auto config = std::make_unique<PluginConfig>(Config::plugin_config(section, *file->descriptor));
  if (config_out) *config_out = std::move(config);
  return *file;
}

namespace {

ActivePlugin activate(const PluginSection &section, Runtime &runtime, PluginRegistry &registry) {
  std::string declined;
  for (const std::string &name : section.candidates) {
    ActivePlugin active;
    const PluginFile &file = resolve_plugin(section, name, registry, &active.config);
    try {
      active.instance = std::make_unique<PluginInstance>(file, runtime, *active.config);
      return active;
    } catch (const PluginDeclined &decline) {
      log_info(decline.what());
      declined += std::string(declined.empty() ? "" : "; ") + decline.what();
    }
  }
  throw Error(format("%s: no %s plugin could run here: %s", section.where.str().c_str(), section.table.c_str(),
                     declined.c_str()));
}

}  // namespace

PluginSet::PluginSet(const Config &config, Runtime &runtime, PluginRegistry &registry)
    : stage(activate(config.plugin(ZF_KIND_STAGE), runtime, registry)),
      offload(activate(config.plugin(ZF_KIND_OFFLOAD), runtime, registry)),
      optimizer(activate(config.plugin(ZF_KIND_OPTIMIZER), runtime, registry)),
      selector(activate(config.plugin(ZF_KIND_SELECTOR), runtime, registry)) {}

}  // namespace zf
