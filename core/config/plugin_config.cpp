#include "config/plugin_config.hpp"

#include "runtime/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace zf {
namespace {

const char *type_name(zf_param_type type) {
  switch (type) {
    case ZF_PARAM_BOOL: return "a boolean";
    case ZF_PARAM_INT: return "an integer";
    case ZF_PARAM_FLOAT: return "a number";
    case ZF_PARAM_STRING: return "a string";
  }
  return "an unknown type";
}

const char *value_type_name(const Value &value) {
  switch (value.index()) {
    case 0: return "a boolean";
    case 1: return "an integer";
    case 2: return "a float";
    default: return "a string";
  }
}

std::vector<std::string> split_choices(const char *choices) {
  std::vector<std::string> out;
  if (!choices) return out;
  std::stringstream stream(choices);
  std::string item;
  while (std::getline(stream, item, '|')) out.push_back(item);
  return out;
}

size_t edit_distance(const std::string &a, const std::string &b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// Whole numbers in full (1048576, not 1.04858e+06).
std::string number_text(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e18) return format("%.0f", value);
  return format("%g", value);
}

}  // namespace

std::string suggest(const std::string &key, const std::vector<std::string> &candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, key.size() / 3) + 1;
  for (const std::string &candidate : candidates) {
    // A key that is the start of a valid one ("bucket" for "bucket_mb") is as good as a typo.
    bool prefix = key.size() >= 3 && candidate.rfind(key, 0) == 0;
    size_t distance = prefix ? 1 : edit_distance(key, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best.empty() ? "" : "did you mean '" + best + "'?";
}

PluginConfig::PluginConfig(std::vector<zf_param_decl> declarations, std::string table)
    : table_(std::move(table)), declarations_(std::move(declarations)) {
  for (const zf_param_decl &decl : declarations_) defaults_[decl.key] = parse_default(decl);
}

PluginConfig::PluginConfig(const zf_descriptor &descriptor, std::string table)
    : PluginConfig(std::vector<zf_param_decl>(descriptor.params,
                                              descriptor.params + descriptor.param_count),
                   std::move(table)) {}

Value PluginConfig::parse_default(const zf_param_decl &decl) {
  std::string text = decl.default_value ? decl.default_value : "";
  Value value;
  const char *end = nullptr;
  errno = 0;
  switch (decl.type) {
    case ZF_PARAM_BOOL:
      ZF_REQUIRE(text == "true" || text == "false", "parameter '%s': default '%s' is not a boolean",
                 decl.key, text.c_str());
      value = text == "true";
      break;
    case ZF_PARAM_INT: {
      char *stop = nullptr;
      long long parsed = std::strtoll(text.c_str(), &stop, 10);
      end = stop;
      ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0,
                 "parameter '%s': default '%s' is not an integer", decl.key, text.c_str());
      value = int64_t(parsed);
      break;
    }
    case ZF_PARAM_FLOAT: {
      char *stop = nullptr;
      double parsed = std::strtod(text.c_str(), &stop);
      end = stop;
      ZF_REQUIRE(!text.empty() && *end == '\0', "parameter '%s': default '%s' is not a number",
                 decl.key, text.c_str());
      value = parsed;
      break;
    }
    case ZF_PARAM_STRING:
      value = text;
      break;
    default:
      throw Error(format("parameter '%s': unknown type %d", decl.key ? decl.key : "?", decl.type));
  }
  std::string why = check(decl, value);
  ZF_REQUIRE(why.empty(), "parameter '%s': default %s %s", decl.key, text.c_str(), why.c_str());
  return value;
}

std::string PluginConfig::check(const zf_param_decl &decl, Value &value) {
  // Integers are accepted where a float is declared (TOML writes 1 for 1.0).
  if (decl.type == ZF_PARAM_FLOAT && std::holds_alternative<int64_t>(value))
    value = double(std::get<int64_t>(value));
  // A key that takes a number or a word (zenflow.update_interval = 4 or "auto"), or a boolean or a
  // word (model.fused = true or "always"), is declared a string.
  if (decl.type == ZF_PARAM_STRING && std::holds_alternative<bool>(value))
    value = std::string(std::get<bool>(value) ? "true" : "false");
  if (decl.type == ZF_PARAM_STRING && std::holds_alternative<int64_t>(value))
    value = std::to_string(std::get<int64_t>(value));
  if (decl.type == ZF_PARAM_STRING && std::holds_alternative<double>(value)) {
    char text[32];
    auto written = std::to_chars(text, text + sizeof text, std::get<double>(value));  // shortest exact form
    value = std::string(text, written.ptr);
  }
  bool type_ok = (decl.type == ZF_PARAM_BOOL && std::holds_alternative<bool>(value)) ||
                 (decl.type == ZF_PARAM_INT && std::holds_alternative<int64_t>(value)) ||
                 (decl.type == ZF_PARAM_FLOAT && std::holds_alternative<double>(value)) ||
                 (decl.type == ZF_PARAM_STRING && std::holds_alternative<std::string>(value));
  if (!type_ok) {
    // --set data.shuffle=False: TOML's booleans are lower case.
    std::string lower = std::holds_alternative<std::string>(value) ? std::get<std::string>(value) : "";
    std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    std::string hint = decl.type == ZF_PARAM_BOOL && (lower == "true" || lower == "false") ? "; write " + lower : "";
    return format("must be %s, got %s%s", type_name(decl.type), value_type_name(value), hint.c_str());
  }
  if (decl.type == ZF_PARAM_INT || decl.type == ZF_PARAM_FLOAT) {
    double number = decl.type == ZF_PARAM_INT ? double(std::get<int64_t>(value))
                                              : std::get<double>(value);
    if (std::isnan(number)) return "must be a number, got nan";
    if (std::isinf(number)) return format("must be a finite number, got %s", number > 0 ? "inf" : "-inf");
    bool min_exclusive = decl.flags & ZF_PARAM_MIN_EXCLUSIVE;
    bool max_exclusive = decl.flags & ZF_PARAM_MAX_EXCLUSIVE;
    bool low = (decl.flags & ZF_PARAM_HAS_MIN) && (min_exclusive ? number <= decl.min : number < decl.min);
    bool high = (decl.flags & ZF_PARAM_HAS_MAX) && (max_exclusive ? number >= decl.max : number > decl.max);
    if (low || high) {
      bool has_min = decl.flags & ZF_PARAM_HAS_MIN, has_max = decl.flags & ZF_PARAM_HAS_MAX;
      if (has_min && has_max)
        return format("must be in %s%s, %s%s", min_exclusive ? "(" : "[", number_text(decl.min).c_str(),
                      number_text(decl.max).c_str(), max_exclusive ? ")" : "]");
      if (has_min) return format("must be %s %s", min_exclusive ? ">" : ">=", number_text(decl.min).c_str());
      return format("must be %s %s", max_exclusive ? "<" : "<=", number_text(decl.max).c_str());
    }
  }
  if (decl.type == ZF_PARAM_STRING && decl.choices) {
    std::vector<std::string> choices = split_choices(decl.choices);
    const std::string &text = std::get<std::string>(value);
    if (std::find(choices.begin(), choices.end(), text) == choices.end()) {
      std::string list;
      for (const std::string &choice : choices) list += (list.empty() ? "\"" : ", \"") + choice + "\"";
      std::string hint = suggest(text, choices);
      return format("must be one of %s%s%s", list.c_str(), hint.empty() ? "" : "; ", hint.c_str());
    }
  }
  return "";
}

void PluginConfig::set(const std::string &key, const Value &value, const Location &where,
                       const std::vector<std::string> &extra_keys, const Location *key_where) {
  auto decl = std::find_if(declarations_.begin(), declarations_.end(),
                           [&](const zf_param_decl &d) { return key == d.key; });
  if (decl == declarations_.end()) {
    std::vector<std::string> keys(extra_keys);
    for (const zf_param_decl &d : declarations_) keys.push_back(d.key);
    std::string hint = suggest(key, keys);
    throw Error(format("%s: unknown key '%s' in [%s]%s%s", (key_where ? *key_where : where).str().c_str(), key.c_str(),
                       table_.c_str(), hint.empty() ? "" : "; ", hint.c_str()));
  }
  Value checked = value;
  std::string why = check(*decl, checked);
  ZF_REQUIRE(why.empty(), "%s: %s.%s = %s: %s", where.str().c_str(), table_.c_str(), key.c_str(),
             value_to_string(value).c_str(), why.c_str());
  values_[key] = checked;
}

const Value *PluginConfig::get(const std::string &key) const {
  if (auto it = values_.find(key); it != values_.end()) return &it->second;
  if (auto it = defaults_.find(key); it != defaults_.end()) return &it->second;
  return nullptr;
}

}  // namespace zf
