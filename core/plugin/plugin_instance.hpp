// plugin_instance.hpp: one live plugin object: its zf_host services table (bound to the runtime,
// the plugin's name and its validated config) and the zf_object its create entry made.
#pragma once

#include "config/plugin_config.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/runtime.hpp"

#include <string>
#include <stdexcept>

namespace zf {

// Thrown when a plugin's create returns ZF_DECLINED ("not on this machine").
struct PluginDeclined : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PluginInstance {
 public:
  // Calls create. Throws PluginDeclined on ZF_DECLINED, zf::Error with the plugin's message on
  // any other failure. runtime and config must outlive the instance.
  PluginInstance(const PluginFile &file, Runtime &runtime, const PluginConfig &config);
  ~PluginInstance();  // calls destroy
  PluginInstance(const PluginInstance &) = delete;
  PluginInstance &operator=(const PluginInstance &) = delete;

  const PluginFile &file() const { return file_; }
  const char *name() const { return file_.descriptor->name; }
  zf_object *object() const { return object_; }
  const zf_host *host() const { return &host_; }
  template <class Api>
  const Api *api() const { return static_cast<const Api *>(file_.descriptor->api); }

  // Turns a plugin entry's status into a zf::Error "<kind> plugin '<name>': <entry>: <message>".
  void check(zf_status status, const zf_error &error, const char *entry) const;

 private:
  friend struct HostCallbacks;
  const PluginFile &file_;
  Runtime &runtime_;
  const PluginConfig &config_;
  zf_host host_{};
  zf_object *object_ = nullptr;
};

// One optimizer step's arguments over ranges and groups (borrowed: they must outlive the step);
// params_out and stream are left empty for the caller to set where it has them.
inline zf_optimizer_step_args optimizer_step_args(const zf_optimizer_range *ranges, size_t range_count,
                                                  const zf_optimizer_group *groups, size_t group_count,
                                                  int64_t step, float grad_scale, zf_tensor_view params,
                                                  zf_tensor_view grads) {
  zf_optimizer_step_args args{};
  args.struct_size = sizeof args;
  args.range_count = uint32_t(range_count);
  args.ranges = ranges;
  args.groups = groups;
  args.group_count = uint32_t(group_count);
  args.grad_scale = grad_scale;
  args.step = step;
  args.params = params;
  args.grads = grads;
  return args;
}

}  // namespace zf
