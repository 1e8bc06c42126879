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

}  // namespace zf
