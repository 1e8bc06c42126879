// plugin_registry.hpp: finds, loads and validates plugin files (Boost.DLL; loaded once, never
// unloaded). A plugin file is zf-KIND-NAME.so; the search path is the built-in plugin directory,
// then ZFCORE_PLUGIN_PATH (':'-separated), then the config's run.plugin_path, first match wins.
// Every rejected file is reported with its reason.
#pragma once

#include <zf/zf_plugin.h>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace zf {

// The oldest ABI this host accepts (each side enforces its own minimum).
constexpr uint32_t kMinimumAbiVersion = ZF_ABI_MAKE(1, 0);

const char *kind_name(zf_kind kind);  // "stage", "offload", "optimizer", "selector"
std::optional<zf_kind> kind_from_name(const std::string &name);

struct PluginFile {
  std::filesystem::path path;
  const zf_descriptor *descriptor = nullptr;  // static in the plugin, lives forever
  uint32_t abi_version = 0;                   // negotiated
};

struct Rejection {
  std::filesystem::path path;
  std::string reason;
};

class PluginRegistry {
 public:
  explicit PluginRegistry(std::vector<std::filesystem::path> search_path);

  // <directory of the zfcore executable>/../lib/zfcore/plugins
  static std::filesystem::path builtin_dir();
  // builtin_dir, then ZFCORE_PLUGIN_PATH entries, then config_paths.
  static std::vector<std::filesystem::path> default_search_path(
      const std::vector<std::string> &config_paths = {});

  const std::vector<std::filesystem::path> &search_path() const { return search_path_; }

  // Loads every zf-*.so in the search path; the first of each KIND-NAME wins, later ones are
  // rejected as shadowed.
  void scan(std::vector<const PluginFile *> &found, std::vector<Rejection> &rejected);

  // The first zf-KIND-NAME.so in search order, validated. Throws zf::Error naming the places
  // searched (and the nearest available name) when absent, or the reason it was rejected.
  const PluginFile &find(zf_kind kind, const std::string &name);

  // Loads and validates one file; nullptr with *reason set when it is rejected.
  const PluginFile *load(const std::filesystem::path &path, std::string *reason);
  // Whether load(path) succeeds, tried in a child process (a crash or hang there is a no).
  bool loads_in_child(const std::filesystem::path &path);

 private:
  std::vector<std::filesystem::path> search_path_;
  std::map<std::string, PluginFile> loaded_;     // canonical path -> file
  std::map<std::string, std::string> rejected_;  // canonical path -> reason
};

}  // namespace zf
