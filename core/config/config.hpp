// config.hpp: the run configuration (TOML), validated before anything runs.
//
// Core tables ([run], [model], [data], [train]) are checked against the core's schema
// (config/schema.cpp). Plugin tables ([stage], [offload], [optimizer], [selector]) name their
// plugin with `plugin` (a name, or a list of names tried in order when one declines); the
// optimizer table also holds the common hyperparameters (lr, beta1, beta2, eps, weight_decay).
// Every other key of a plugin table belongs to the plugin and is checked against the parameters
// it declares once it is loaded (see plugin_config.hpp). `--set table.key=value` overrides go
// through the same checks.
#pragma once

#include "config/plugin_config.hpp"

#include <zf/zf_plugin.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace zf {

struct ConfigEntry {
  std::string key;
  Value value;
  Location where;      // of the value
  Location key_where;  // of the key
};

struct PluginSection {
  zf_kind kind = ZF_KIND_STAGE;
  std::string table;                    // "stage", "offload", "optimizer", "selector"
  std::vector<std::string> candidates;  // plugin names in preference order
  Location where;                       // of the `plugin` key (or the table when defaulted)
  std::vector<ConfigEntry> entries;     // the plugin's own keys, checked when it is loaded
};

// The run's whole config (named RunConfig, not Config: the SDK's zf::Config in zf_plugin.hpp is the
// plugins' getter over one table, and two classes of one name in a program break the ODR).
class RunConfig {
 public:
  // Reads and checks path with overrides ("table.key=value") after removing the keys named in
  // unsets ("table.key", as if the file did not have them); throws zf::Error with a location.
  // Relative run.plugin_path entries of the file are taken from the file's directory.
  static RunConfig load(const std::string &path, const std::vector<std::string> &overrides = {},
                     const std::vector<std::string> &unsets = {});
  // The same from the file's content: a DeepSpeed JSON config when path ends in .json, else TOML.
  static RunConfig from_file_text(const std::string &text, const std::string &path,
                                  const std::vector<std::string> &overrides = {},
                                  const std::vector<std::string> &unsets = {});
  // The same from TOML text (tests); `name` stands in for the file name in messages.
  static RunConfig parse(const std::string &text, const std::string &name,
                      const std::vector<std::string> &overrides = {}, const std::vector<std::string> &unsets = {});

  const std::string &file() const { return file_; }
  // What the config was made from: the file, the text parsed (a DeepSpeed JSON's converted TOML),
  // the --set and --unset arguments. A checkpoint records them, so that zfcore export needs no file.
  struct Given {
    std::string file, text;
    std::vector<std::string> overrides, unsets;
  };
  const Given &given() const { return given_; }
  const PluginConfig &core(const std::string &table) const;  // "run", "model", "data", "train", "optimizer"
  bool boolean(const std::string &table, const std::string &key) const;
  int64_t integer(const std::string &table, const std::string &key) const;
  double real(const std::string &table, const std::string &key) const;
  std::string string(const std::string &table, const std::string &key) const;
  // Where the user wrote table.key, or a location naming the file when it was defaulted.
  Location where(const std::string &table, const std::string &key) const;

  // Whether the file or a --set wrote the table (a [zenflow] table turns ZenFlow on).
  bool has_table(const std::string &table) const { return tables_.count(table) != 0; }
  // Whether the file or a --set wrote the core key table.key (else it has its default).
  bool is_set(const std::string &table, const std::string &key) const { return locations_.count(table + "." + key) != 0; }

  // train.global_batch (DeepSpeed's train_batch_size) against the ranks of the launch: derives
  // train.grad_accum (or train.micro_batch) where it is not set, else checks that global_batch =
  // micro_batch x grad_accum x world_size, naming the three when not. world_size 0: the ranks are
  // not known yet (validate); only what holds for any number of ranks is checked.
  void apply_global_batch(int world_size);

  // What the commands that run a DeepSpeed JSON print before they start: its keys without a
  // zfcore key and what happens to them ("ds.key: ignored: ..."), as `zfcore convert` lists them.
  const std::vector<std::string> &notes() const { return notes_; }

  const PluginSection &plugin(zf_kind kind) const;
  const std::vector<std::string> &plugin_path() const { return plugin_path_; }

  // Builds the validated config of the plugin chosen for `section` from its declarations.
  static PluginConfig plugin_config(const PluginSection &section, const zf_descriptor &descriptor);

 private:
  void set(const std::string &table, const std::string &key, const Value &value,
           const Location &where, const Location &key_where);
  std::string file_;
  std::map<std::string, PluginConfig> core_;
  std::map<std::string, Location> locations_;  // "table.key" -> where
  std::map<zf_kind, PluginSection> plugins_;
  std::vector<std::string> plugin_path_;
  std::set<std::string> tables_;  // written by the file or --set
  std::vector<std::string> notes_;
  Given given_;
};

// A --set value of a list key (a plugin table's `plugin`, run.plugin_path): a TOML array of names,
// or one name. The shell strips the quotes of --set stage.plugin=["zero3","zero2"], so bare words
// in brackets are names too. Errors name `where`.
std::vector<std::string> name_list(const std::string &text, const Location &where);

// The core's schema: table name -> declared keys (config/schema.cpp), assembled from each
// table's own declarations (model/schema.cpp, data/schema.cpp, ...).
const std::map<std::string, std::vector<zf_param_decl>> &core_schema();
std::vector<zf_param_decl> model_schema();
std::vector<zf_param_decl> data_schema();

// One declared key; flags are ZF_PARAM_* (kMin etc. below), choices '|'-separated.
zf_param_decl decl(const char *key, zf_param_type type, const char *default_value, const char *doc,
                   uint32_t flags = 0, double min = 0, double max = 0, const char *choices = nullptr);
constexpr uint32_t kMin = ZF_PARAM_HAS_MIN;
constexpr uint32_t kMinOpen = ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE;
constexpr uint32_t kUnitOpen = ZF_PARAM_HAS_MIN | ZF_PARAM_HAS_MAX | ZF_PARAM_MAX_EXCLUSIVE;
constexpr uint32_t kUnitClosed = ZF_PARAM_HAS_MIN | ZF_PARAM_HAS_MAX;
constexpr uint32_t kUnitLeftOpen = ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE | ZF_PARAM_HAS_MAX;  // (0, 1]
constexpr uint32_t kUnitRightOpen = kUnitOpen;                                                 // [0, 1)
// The optimizer hyperparameters every optimizer plugin receives per group.
const std::vector<std::string> &optimizer_common_keys();

}  // namespace zf
