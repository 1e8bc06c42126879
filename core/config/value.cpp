#include "config/value.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <cmath>
#include <cstdlib>
#include <sstream>

namespace zf {

std::string Location::str() const {
  if (file == "--set") return "--set " + excerpt(text);  // a huge value is not echoed whole
  return format("%s:%d:%d", file.c_str(), line, column);
}

std::string value_to_string(const Value &value) {
  if (auto *b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (auto *i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (auto *d = std::get_if<double>(&value)) {
    // The shortest text that reads back the same double: 0.1, not 0.10000000000000001.
    std::string text;
    for (int digits = 1; digits <= 17; ++digits) {
      text = format("%.*g", digits, *d);
      if (std::strtod(text.c_str(), nullptr) == *d || std::isnan(*d)) break;
    }
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    return text;
  }
  return "\"" + std::get<std::string>(value) + "\"";
}

std::string redefined_table_hint(const std::string &description, const std::string &text) {
  const std::string lead = "cannot redefine existing table '";
  const size_t at = description.find(lead);
  if (at == std::string::npos) return "";
  const size_t begin = at + lead.size();
  const std::string table = description.substr(begin, description.find('\'', begin) - begin);
  std::stringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    line.erase(0, line.find_first_not_of(" \t"));
    if (line.rfind("[" + table + "]", 0) == 0)
      return format("; [%s] is already at line %d: put these keys in that table", table.c_str(), number);
  }
  return "";
}

}  // namespace zf
