// plugin_config.hpp: one plugin's validated config table (the zf_config a plugin reads through
// zf_host's getters). Validation against the plugin's declared parameters happens here, so the
// core, `zfcore validate` and tests all share it.
#pragma once

#include "config/value.hpp"

#include <zf/zf_plugin.h>

#include <map>
#include <string>
#include <vector>

namespace zf {

class PluginConfig {
 public:
  PluginConfig() = default;
  // Declarations (copied) and the table name used in messages ("optimizer").
  PluginConfig(std::vector<zf_param_decl> declarations, std::string table);
  PluginConfig(const zf_descriptor &descriptor, std::string table);

  // Validates and stores one user value; throws zf::Error "<location>: <table>.<key> ...: why"
  // for an undeclared key (with the nearest of the declared keys and `extra_keys` suggested), a
  // wrong type, a value out of range or outside the choices. Unknown keys are reported at
  // key_where (where the key itself was written) when given.
  void set(const std::string &key, const Value &value, const Location &where,
           const std::vector<std::string> &extra_keys = {}, const Location *key_where = nullptr);
  const std::string &table() const { return table_; }

  // The value or the declared default; nullptr if the key is not declared.
  const Value *get(const std::string &key) const;
  const std::vector<zf_param_decl> &declarations() const { return declarations_; }
  const std::map<std::string, Value> &values() const { return values_; }  // set by the user

  // Parses a declaration's default text into a Value of its type; throws on malformed defaults.
  static Value parse_default(const zf_param_decl &decl);
  // Empty if value fits decl, else the reason ("must be > 0", "expected a float").
  static std::string check(const zf_param_decl &decl, Value &value);

 private:
  std::string table_;
  std::vector<zf_param_decl> declarations_;
  std::map<std::string, Value> defaults_;
  std::map<std::string, Value> values_;
};

// "did you mean 'x'?" for the candidate nearest to key by edit distance, or "" if none is close.
std::string suggest(const std::string &key, const std::vector<std::string> &candidates);

}  // namespace zf
