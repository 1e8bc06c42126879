#include "plugin/plugin_advice.hpp"

#include "plugin/api_copy.hpp"
#include "plugin/memory_entry.hpp"
#include "plugin/plugin_registry.hpp"

#include <algorithm>
#include <cstring>
#include <vector>

namespace zf {

namespace {

bool meets(const zf_descriptor &d, const PluginNeeds &needs) {
  const uint32_t traits = plugin_traits(d);
  return (d.capabilities & needs.capabilities) == needs.capabilities && (traits & needs.traits) == needs.traits &&
         !(traits & needs.without) && !(needs.except && std::strcmp(d.name, needs.except) == 0);
}

}  // namespace

uint32_t plugin_traits(const zf_descriptor &d) {
  uint32_t traits = 0;
  if (d.kind == ZF_KIND_OPTIMIZER) {
    zf_optimizer_api api = api_copy<zf_optimizer_api>(d.api);
    if (api.state_spec && api.bind_state) traits |= kHostHeldState;
  } else if (d.kind == ZF_KIND_OFFLOAD) {
    zf_offload_api api = api_copy<zf_offload_api>(d.api);
    if (api.gradients_out && api.parameters_in) traits |= kMovesData;
    if (params_on_host(PluginFile{{}, &d, d.abi_version}, PluginConfig(d, kind_name(d.kind)))) traits |= kParamsOnHost;
  }
  return traits;
}

std::string installed_with(PluginRegistry &registry, zf_kind kind, const PluginNeeds &needs) {
  std::vector<const PluginFile *> found;
  std::vector<Rejection> rejected;
  registry.scan(found, rejected);
  std::vector<std::string> names;
  for (const PluginFile *file : found)
    if (file->descriptor->kind == kind && meets(*file->descriptor, needs)) names.push_back(file->descriptor->name);
  if (names.empty()) return "none is installed; `zfcore plugins` lists the plugins found";
  std::sort(names.begin(), names.end());
  std::string text = std::string(kind_name(kind)) + ".plugin = ";
  for (size_t i = 0; i < names.size(); ++i)
    text += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + ("\"" + names[i] + "\"");
  return text;
}

}  // namespace zf
