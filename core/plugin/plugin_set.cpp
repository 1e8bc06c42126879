#include "plugin/plugin_set.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace zf {

namespace {

// A key of `section` that plugin `file` does not declare but another plugin of the kind does
// (left over from an A/B that switched plugins): says whose key it is and how to drop it.
void check_foreign_keys(const PluginSection &section, const PluginFile &file, PluginRegistry &registry) {
  const zf_descriptor &mine = *file.descriptor;
  auto declares = [](const zf_descriptor &d, const std::string &key) {
    for (uint32_t i = 0; i < d.param_count; ++i)
      if (key == d.params[i].key) return true;
    return false;
  };
  std::vector<const PluginFile *> found;
  std::vector<Rejection> rejected;
  for (const ConfigEntry &entry : section.entries) {
    if (declares(mine, entry.key) || entry.key == "plugin") continue;
    if (found.empty()) registry.scan(found, rejected);
    for (const PluginFile *other : found)
      if (other->descriptor->kind == section.kind && other != &file && declares(*other->descriptor, entry.key))
        throw Error(format("%s: %s.%s is a parameter of %s plugin '%s', not of '%s' (%s.plugin): remove it, or "
                           "drop it with --unset %s.%s",
                           entry.key_where.str().c_str(), section.table.c_str(), entry.key.c_str(),
                           section.table.c_str(), other->descriptor->name, mine.name, section.table.c_str(),
                           section.table.c_str(), entry.key.c_str()));
  }
}

}  // namespace

const PluginFile &resolve_plugin(const PluginSection &section, const std::string &name, PluginRegistry &registry,
                                 std::unique_ptr<PluginConfig> *config_out) {
  const PluginFile *file = nullptr;
  try {
    file = &registry.find(section.kind, name);
  } catch (const Error &error) {
    throw Error(format("%s: %s.plugin = \"%s\": %s", section.where.str().c_str(), section.table.c_str(),
                       name.c_str(), error.what()));
  }
  check_foreign_keys(section, *file, registry);
  auto config = std::make_unique<PluginConfig>(RunConfig::plugin_config(section, *file->descriptor));
  if (config_out) *config_out = std::move(config);
  return *file;
}

namespace {

LivePlugin activate(const PluginSection &section, Runtime &runtime, PluginRegistry &registry) {
  std::string declined;
  for (const std::string &name : section.candidates) {
    LivePlugin active;
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

// Every plugin table's parameters are checked before any plugin is created: a bad [selector]
// value is reported before the optimizer allocates anything.
const RunConfig &checked(const RunConfig &config, PluginRegistry &registry) {
  for (zf_kind kind : {ZF_KIND_STAGE, ZF_KIND_OFFLOAD, ZF_KIND_OPTIMIZER, ZF_KIND_SELECTOR}) {
    const PluginSection &section = config.plugin(kind);
    for (const std::string &name : section.candidates) resolve_plugin(section, name, registry, nullptr);
  }
  return config;
}

}  // namespace

PluginSet::PluginSet(const RunConfig &config, Runtime &runtime, PluginRegistry &registry)
    : stage(activate(checked(config, registry).plugin(ZF_KIND_STAGE), runtime, registry)),
      offload(activate(config.plugin(ZF_KIND_OFFLOAD), runtime, registry)),
      optimizer(activate(config.plugin(ZF_KIND_OPTIMIZER), runtime, registry)),
      selector(activate(config.plugin(ZF_KIND_SELECTOR), runtime, registry)),
      config_(config), runtime_(runtime), registry_(registry) {}

const OptimizerPlugin &PluginSet::device_optimizer() {
  if (device_optimizer_) return *device_optimizer_;
  PluginSection section = config_.plugin(ZF_KIND_OPTIMIZER);
  if (runtime_.device == ZF_DEVICE_CUDA) {
    section.candidates = {config_.string("optimizer", "device_plugin")};
    section.entries.clear();  // the [optimizer] keys are the CPU optimizer's
  } else {
    section.candidates = {optimizer.name()};
  }
  device_optimizer_ = std::make_unique<OptimizerPlugin>(activate(section, runtime_, registry_));
  return *device_optimizer_;
}

}  // namespace zf
