#include "plugin/known_plugins.hpp"

#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"

namespace zf {

const std::vector<KnownPlugin> &known_plugins() {
  static const std::vector<KnownPlugin> plugins = {
      {ZF_KIND_STAGE, "zero0", "every build"},          {ZF_KIND_STAGE, "zero1", "every build"},
      {ZF_KIND_STAGE, "zero2", "every build"},          {ZF_KIND_STAGE, "zero3", "every build"},
      {ZF_KIND_OFFLOAD, "none", "every build"},         {ZF_KIND_OFFLOAD, "cpu_optimizer", "every build"},
      {ZF_KIND_OFFLOAD, "cpu_full", "every build"},     {ZF_KIND_OFFLOAD, "nvme", "every build"},
      {ZF_KIND_OPTIMIZER, "adamw_ref", "every build"},  {ZF_KIND_OPTIMIZER, "cpu_adam", "every build"},
      {ZF_KIND_OPTIMIZER, "cpu_lion", "every build"},   {ZF_KIND_OPTIMIZER, "cpu_adagrad", "every build"},
      {ZF_KIND_OPTIMIZER, "gpu_adam", "CUDA builds"},   {ZF_KIND_SELECTOR, "all", "every build"},
      {ZF_KIND_SELECTOR, "topk_l1", "every build"},     {ZF_KIND_SELECTOR, "topk_l2", "every build"}};
  return plugins;
}

const KnownPlugin *known_plugin(zf_kind kind, const std::string &name) {
  for (const KnownPlugin &plugin : known_plugins())
    if (plugin.kind == kind && name == plugin.name) return &plugin;
  return nullptr;
}

bool installed(const PluginRegistry &registry, zf_kind kind, const std::string &name) {
  const std::string file_name = format("zf-%s-%s.so", kind_name(kind), name.c_str());
  for (const std::filesystem::path &dir : registry.search_path()) {
    std::error_code ec;
    if (std::filesystem::exists(dir / file_name, ec)) return true;
  }
  return false;
}

}  // namespace zf
