#include "config/config.hpp"
#include "config/value.hpp"

#include "config/deepspeed.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <toml++/toml.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <algorithm>
#include <optional>
#include <sstream>

namespace zf {
namespace {

// Far above any real config; a bound keeps a wrong file (a data set, /dev/zero) from being read whole.
constexpr uint64_t kMaxConfigBytes = 16ull << 20;

// Whether some line holds more than blanks and a comment: an empty file is a mistake (a wrong
// path, a failed download), not a request for the defaults.
bool has_settings(const std::string &text) {
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = std::min(text.find('\n', begin), text.size());
    size_t first = text.find_first_not_of(" \t\r", begin);
    if (first < end && text[first] != '#') return true;
    begin = end + 1;
  }
  return false;
}

const std::map<std::string, zf_kind> &plugin_tables() {
  static const std::map<std::string, zf_kind> tables = {{"stage", ZF_KIND_STAGE},
                                                        {"offload", ZF_KIND_OFFLOAD},
                                                        {"optimizer", ZF_KIND_OPTIMIZER},
                                                        {"selector", ZF_KIND_SELECTOR}};
  return tables;
}

const std::map<zf_kind, std::string> &default_plugins() {
  static const std::map<zf_kind, std::string> defaults = {{ZF_KIND_STAGE, "zero0"},
                                                          {ZF_KIND_OFFLOAD, "none"},
                                                          {ZF_KIND_OPTIMIZER, "adamw_ref"},
                                                          {ZF_KIND_SELECTOR, "topk_l1"}};
  return defaults;
}

std::vector<std::string> known_tables() {
  std::vector<std::string> names;
  for (const auto &[name, decls] : core_schema()) names.push_back(name);
  for (const auto &[name, kind] : plugin_tables())
    if (!core_schema().count(name)) names.push_back(name);
  return names;
}

Location at(const std::string &file, const toml::source_region &source) {
  return Location{file, int(source.begin.line), int(source.begin.column), ""};
}

// A TOML scalar as a Value; nullopt for arrays, tables and dates.
std::optional<Value> scalar(const toml::node &node) {
  if (auto v = node.as_boolean()) return Value(v->get());
  if (auto v = node.as_integer()) return Value(int64_t(v->get()));
  if (auto v = node.as_floating_point()) return Value(v->get());
  if (auto v = node.as_string()) return Value(v->get());
  return std::nullopt;
}

const char *node_kind(const toml::node &node) {
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  return "a date or time";
}

// Removes "table.key" from the parsed file (--unset); a key the file does not have is an error.
void unset(toml::table &root, const std::string &argument, const std::string &file) {
  auto dot = argument.find('.');
  ZF_REQUIRE(dot != std::string::npos && dot > 0 && dot + 1 < argument.size() && argument.find('=') == std::string::npos,
             "--unset %s: expected --unset table.key", argument.c_str());
  std::string table = argument.substr(0, dot), key = argument.substr(dot + 1);
  toml::table *found = root[table].as_table();
  ZF_REQUIRE(found && found->contains(key), "--unset %s: %s has no key '%s' in [%s] to remove", argument.c_str(),
             file.c_str(), key.c_str(), table.c_str());
  found->erase(key);
}

// A run.plugin_path entry written in the file: relative to the file's directory.
std::string beside(const std::string &file, const std::string &entry) {
  std::filesystem::path path(entry), directory = std::filesystem::path(file).parent_path();
  return path.is_absolute() || directory.empty() ? entry : (directory / path).string();
}

}  // namespace

std::vector<std::string> name_list(const std::string &text, const Location &where) {
  if (text.empty() || text.front() != '[') return {text};
  std::vector<std::string> names;
  try {
    toml::table parsed = toml::parse("v = " + text);
    if (auto *array = parsed["v"].as_array()) {
      for (auto &&item : *array) {
        ZF_REQUIRE(item.is_string(), "%s: expected a list of names like [\"zero3\", \"zero2\"]", where.str().c_str());
        names.push_back(item.as_string()->get());
      }
    }
  } catch (const toml::parse_error &) {
    ZF_REQUIRE(text.back() == ']', "%s: a list ends with ']'", where.str().c_str());
    std::stringstream items(text.substr(1, text.size() - 2));
    for (std::string item; std::getline(items, item, ',');) {
      item.erase(0, item.find_first_not_of(" \t"));
      item.erase(item.find_last_not_of(" \t") + 1);
      names.push_back(item);
    }
  }
  for (const std::string &name : names)
    ZF_REQUIRE(!name.empty(), "%s: an empty name in the list", where.str().c_str());
  ZF_REQUIRE(!names.empty(), "%s: the list names nothing", where.str().c_str());
  return names;
}

RunConfig RunConfig::load(const std::string &path, const std::vector<std::string> &overrides,
                    const std::vector<std::string> &unsets) {
  std::string text;
  std::string why = read_regular_file(path, kMaxConfigBytes, &text);
  ZF_REQUIRE(why.empty(), "%s:1:1: cannot read the config file: %s", path.c_str(), why.c_str());
  return from_file_text(text, path, overrides, unsets);
}

RunConfig RunConfig::from_file_text(const std::string &text, const std::string &path,
                                    const std::vector<std::string> &overrides, const std::vector<std::string> &unsets) {
  // A DeepSpeed config runs as the TOML `zfcore convert` writes for it; locations name those lines.
  if (is_deepspeed_config_name(path)) {
    DeepSpeedConversion converted = convert_deepspeed(text, path);
    RunConfig config = parse(converted.toml, path + " (as `zfcore convert " + path + "` writes it)", overrides, unsets);
    config.notes_ = converted.notes;
    config.given_.file = path;
    require_model_and_data(config, path, /*converted=*/false);
    return config;
  }
  ZF_REQUIRE(has_settings(text),
             "%s:1:1: the config file is empty (or only comments); examples/quickstart.toml shows the common keys",
             path.c_str());
  RunConfig config = parse(text, path, overrides, unsets);
  config.given_.file = path;
  if (converted_by_zfcore(text)) require_model_and_data(config, path, /*converted=*/true);
  return config;
}

RunConfig RunConfig::parse(const std::string &text, const std::string &name, const std::vector<std::string> &overrides,
                     const std::vector<std::string> &unsets) {
  RunConfig config;
  config.file_ = name;
  config.given_ = Given{name, text, overrides, unsets};
  for (const auto &[table, decls] : core_schema()) config.core_.emplace(table, PluginConfig(decls, table));
  for (const auto &[table, kind] : plugin_tables()) {
    PluginSection section;
    section.kind = kind;
    section.table = table;
    section.candidates = {default_plugins().at(kind)};
    section.where = Location{name, 1, 1, ""};
    config.plugins_[kind] = section;
  }

  toml::table root;
  try {
    root = toml::parse(text, name);
  } catch (const toml::parse_error &error) {
    const std::string description(error.description());
    throw Error(format("%s: syntax error: %s%s", at(name, error.source()).str().c_str(), description.c_str(),
                       redefined_table_hint(description, text).c_str()));
  }
  for (const std::string &argument : unsets) unset(root, argument, name);

  for (auto &&[table_key, table_node] : root) {
    std::string table(table_key.str());
    Location table_where = at(name, table_key.source());
    if (!table_node.is_table()) {
      std::string hint = suggest(table, known_tables());
      throw Error(format("%s: '%s' must be a table like [run] or [model]; top-level keys are not allowed%s%s",
                         table_where.str().c_str(), table.c_str(), hint.empty() ? "" : "; ", hint.c_str()));
    }
    auto known = known_tables();
    if (std::find(known.begin(), known.end(), table) == known.end()) {
      std::string hint = suggest(table, known);
      throw Error(format("%s: unknown table [%s]%s%s", table_where.str().c_str(), table.c_str(),
                         hint.empty() ? "" : "; ", hint.c_str()));
    }
    config.tables_.insert(table);
    for (auto &&[key_node, value_node] : *table_node.as_table()) {
      std::string key(key_node.str());
      Location where = at(name, value_node.source());
      if (table == "run" && key == "plugin_path") {
        config.plugin_path_.clear();
        if (auto *array = value_node.as_array()) {
          for (auto &&item : *array) {
            ZF_REQUIRE(item.is_string(), "%s: run.plugin_path must be a list of directory names",
                       at(name, item.source()).str().c_str());
            config.plugin_path_.push_back(beside(name, item.as_string()->get()));
          }
        } else if (auto *single = value_node.as_string()) {
          config.plugin_path_.push_back(beside(name, single->get()));
        } else {
          throw Error(format("%s: run.plugin_path must be a directory or a list of them", where.str().c_str()));
        }
        continue;
      }
      if (plugin_tables().count(table) && key == "plugin") {
        PluginSection &section = config.plugins_[plugin_tables().at(table)];
        section.candidates.clear();
        section.where = where;
        if (auto *array = value_node.as_array()) {
          for (auto &&item : *array) {
            ZF_REQUIRE(item.is_string(), "%s: %s.plugin must be a name or a list of names",
                       at(name, item.source()).str().c_str(), table.c_str());
            section.candidates.push_back(item.as_string()->get());
          }
        } else if (auto *single = value_node.as_string()) {
          section.candidates.push_back(single->get());
        }
        ZF_REQUIRE(!section.candidates.empty(), "%s: %s.plugin must be a plugin name or a non-empty list of names",
                   where.str().c_str(), table.c_str());
        continue;
      }
      auto value = scalar(value_node);
      ZF_REQUIRE(value.has_value(), "%s: %s.%s is %s; expected a single value", where.str().c_str(),
                 table.c_str(), key.c_str(), node_kind(value_node));
      config.set(table, key, *value, where, at(name, key_node.source()));
    }
  }

  for (const std::string &argument : overrides) {
    Location where{"--set", 0, 0, argument};
    auto equals = argument.find('=');
    auto dot = argument.find('.');
    ZF_REQUIRE(equals != std::string::npos && dot != std::string::npos && dot < equals,
               "%s: expected --set table.key=value", where.str().c_str());
    std::string table = argument.substr(0, dot);
    std::string key = argument.substr(dot + 1, equals - dot - 1);
    std::string text_value = argument.substr(equals + 1);
    Value value = text_value;  // a bare word stays a string
    bool list = false;
    try {
      toml::table parsed = toml::parse("v = " + text_value);
      if (auto node = parsed.get("v"); node && scalar(*node)) value = *scalar(*node);
      list = parsed.get("v") && parsed.get("v")->is_array();
    } catch (const toml::parse_error &) {
    }
    // A key of string type (a path, a name) keeps what was typed: run.output_dir=1e3 is "1e3", not
    // 1000, and checkpoint.export_hf=true is "true"; only a quoted TOML string is unquoted.
    bool string_key = false;
    if (config.core_.count(table))
      for (const zf_param_decl &decl : config.core_.at(table).declarations())
        string_key |= key == decl.key && decl.type == ZF_PARAM_STRING;
    if (string_key && (!std::holds_alternative<std::string>(value) || list)) {
      value = text_value;
      list = false;
    }
    // A number beyond what a double holds (1e309) is named as such, not kept as a word ("got a string").
    if (!string_key && std::holds_alternative<std::string>(value) && std::get<std::string>(value) == text_value) {
      errno = 0;
      char *end = nullptr;
      const double number = std::strtod(text_value.c_str(), &end);
      ZF_REQUIRE(!(end != text_value.c_str() && *end == '\0' && errno == ERANGE && std::isinf(number)),
                 "%s: %s is beyond the range of a number (at most about 1.8e308): give a smaller value",
                 where.str().c_str(), excerpt(text_value).c_str());
    }
    auto known = known_tables();
    if (std::find(known.begin(), known.end(), table) == known.end()) {
      std::string hint = suggest(table, known);
      throw Error(format("%s: unknown table [%s]%s%s", where.str().c_str(), table.c_str(),
                         hint.empty() ? "" : "; ", hint.c_str()));
    }
    if (table == "run" && key == "plugin_path") {
      config.plugin_path_ = name_list(text_value, where);
    } else if (plugin_tables().count(table) && key == "plugin") {
      PluginSection &section = config.plugins_[plugin_tables().at(table)];
      section.candidates = name_list(text_value, where);
      section.where = where;
    } else {
      ZF_REQUIRE(!list, "%s: %s.%s takes a single value, not a list", where.str().c_str(), table.c_str(), key.c_str());
      config.set(table, key, value, where, where);
    }
    config.tables_.insert(table);
  }
  return config;
}

void RunConfig::set(const std::string &table, const std::string &key, const Value &value,
                 const Location &where, const Location &key_where) {
  auto core = core_.find(table);
  bool is_core_key = false;
  if (core != core_.end()) {
    for (const zf_param_decl &decl : core->second.declarations()) is_core_key |= key == decl.key;
  }
  if (plugin_tables().count(table) && !is_core_key) {
    // The plugin's own key: kept with its location, checked once the plugin is loaded.
    // Keys are unique within a TOML table, so only a --set override can repeat one (and replaces
    // it); searching for it only then keeps checking a file linear in its number of keys.
    auto &entries = plugins_[plugin_tables().at(table)].entries;
    if (where.file == "--set")
      entries.erase(std::remove_if(entries.begin(), entries.end(), [&](const ConfigEntry &e) { return e.key == key; }),
                    entries.end());
    entries.push_back(ConfigEntry{key, value, where, key_where});
    return;
  }
  std::vector<std::string> extra;
  if (table == "run") extra.push_back("plugin_path");
  core->second.set(key, value, where, extra, &key_where);
  locations_[table + "." + key] = where;
}

const PluginConfig &RunConfig::core(const std::string &table) const {
  auto it = core_.find(table);
  ZF_REQUIRE(it != core_.end(), "internal: no core table [%s]", table.c_str());
  return it->second;
}

namespace {
template <class T>
const T &typed(const RunConfig &config, const std::string &table, const std::string &key) {
  const Value *value = config.core(table).get(key);
  ZF_REQUIRE(value && std::holds_alternative<T>(*value), "internal: %s.%s is not declared with that type",
             table.c_str(), key.c_str());
  return std::get<T>(*value);
}
}  // namespace

bool RunConfig::boolean(const std::string &t, const std::string &k) const { return typed<bool>(*this, t, k); }
int64_t RunConfig::integer(const std::string &t, const std::string &k) const { return typed<int64_t>(*this, t, k); }
double RunConfig::real(const std::string &t, const std::string &k) const { return typed<double>(*this, t, k); }
std::string RunConfig::string(const std::string &t, const std::string &k) const {
  return typed<std::string>(*this, t, k);
}

Location RunConfig::where(const std::string &table, const std::string &key) const {
  auto it = locations_.find(table + "." + key);
  return it != locations_.end() ? it->second : Location{file_, 1, 1, ""};
}

const PluginSection &RunConfig::plugin(zf_kind kind) const { return plugins_.at(kind); }


PluginConfig RunConfig::plugin_config(const PluginSection &section, const zf_descriptor &descriptor) {
  PluginConfig config(descriptor, section.table);
  std::vector<std::string> extra = {"plugin"};
  if (section.kind == ZF_KIND_OPTIMIZER)
    extra.insert(extra.end(), optimizer_common_keys().begin(), optimizer_common_keys().end());
  for (const ConfigEntry &entry : section.entries)
    config.set(entry.key, entry.value, entry.where, extra, &entry.key_where);
  return config;
}


}  // namespace zf
