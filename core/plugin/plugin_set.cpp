#include "plugin/plugin_set.hpp"

#include "plugin/known_plugins.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace zf {

namespace {

bool declares(const zf_descriptor &d, const std::string &key) {
  for (uint32_t i = 0; i < d.param_count; ++i)
    if (key == d.params[i].key) return true;
  return false;
}

// A key of `section` that plugin `file` does not declare but another plugin of the kind does
// (left over from an A/B that switched plugins): says whose key it is and how to drop it.
void check_foreign_keys(const PluginSection &section, const PluginFile &file, PluginRegistry &registry) {
  const zf_descriptor &mine = *file.descriptor;
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

// The table's keys for candidate `file` of a fallback list: a key that `file` does not declare but
// another candidate installed here does is that one's (optimizer.threads is cpu_adam's, not
// gpu_adam's, in ["gpu_adam", "cpu_adam"]).
PluginSection keys_of(const PluginSection &section, const PluginFile &file, PluginRegistry &registry) {
  PluginSection own = section;
  if (section.candidates.size() < 2) return own;
  auto another_declares = [&](const std::string &key) {
    for (const std::string &name : section.candidates)
      if (name != file.descriptor->name && installed(registry, section.kind, name) &&
          declares(*registry.find(section.kind, name).descriptor, key))
        return true;
    return false;
  };
  own.entries.clear();
  for (const ConfigEntry &entry : section.entries)
    if (declares(*file.descriptor, entry.key) || !another_declares(entry.key)) own.entries.push_back(entry);
  return own;
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
  const PluginSection own = keys_of(section, *file, registry);
  check_foreign_keys(own, *file, registry);
  auto config = std::make_unique<PluginConfig>(RunConfig::plugin_config(own, *file->descriptor));
  if (config_out) *config_out = std::move(config);
  return *file;
}

std::vector<std::string> candidates_here(const PluginSection &section, const PluginRegistry &registry,
                                         std::vector<std::string> *skipped) {
  std::vector<std::string> here, absent;
  for (const std::string &name : section.candidates) {
    const KnownPlugin *known = known_plugin(section.kind, name);
    if (!known || installed(registry, section.kind, name)) {
      here.push_back(name);
      continue;
    }
    absent.push_back(format("%s plugin '%s' is not installed here (zfcore has it in %s)", section.table.c_str(),
                            name.c_str(), known->built));
    if (skipped) skipped->push_back(absent.back() + ": skipped, as one that declines");
  }
  if (here.empty()) {
    std::string why;
    for (const std::string &reason : absent) why += (why.empty() ? "" : "; ") + reason;
    throw Error(format("%s: %s.plugin: %s; `zfcore plugins` lists the plugins installed here",
                       section.where.str().c_str(), section.table.c_str(), why.c_str()));
  }
  return here;
}

void check_plugin_tables(const RunConfig &config, PluginRegistry &registry, std::vector<std::string> *skipped) {
  for (zf_kind kind : {ZF_KIND_STAGE, ZF_KIND_OFFLOAD, ZF_KIND_OPTIMIZER, ZF_KIND_SELECTOR}) {
    const PluginSection &section = config.plugin(kind);
    for (const std::string &name : candidates_here(section, registry, skipped))
      resolve_plugin(section, name, registry, nullptr);
  }
}

namespace {

LivePlugin activate(const PluginSection &section, Runtime &runtime, PluginRegistry &registry) {
  std::string declined;
  std::vector<std::string> skipped;
  const std::vector<std::string> names = candidates_here(section, registry, &skipped);
  for (const std::string &note : skipped)  // said before the run (check_plugin_tables' notes)
    declined += std::string(declined.empty() ? "" : "; ") + note;
  for (const std::string &name : names) {
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
  check_plugin_tables(config, registry, nullptr);
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
