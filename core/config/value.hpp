// value.hpp: config values and where they came from.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

namespace zf {

using Value = std::variant<bool, int64_t, double, std::string>;

// Where a value was written: "train.toml:12:14", or a command-line override "--set a.b=1".
struct Location {
  std::string file;  // path, or "--set" for command-line overrides
  int line = 0;
  int column = 0;
  std::string text;  // for --set: the whole argument
  std::string str() const;
};

std::string value_to_string(const Value &value);  // TOML literal form: true, 4, 0.001, "auto"

// For toml++'s "cannot redefine existing table 'model'" of a config's `text`: where the first table is
// and what to do ("; [model] is already at line 3: ..."); "" for any other error.
std::string redefined_table_hint(const std::string &description, const std::string &text);

}  // namespace zf
