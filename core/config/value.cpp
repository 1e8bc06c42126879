#include "config/value.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <cmath>

namespace zf {

std::string Location::str() const {
  if (file == "--set") return "--set " + excerpt(text);  // a huge value is not echoed whole
  return format("%s:%d:%d", file.c_str(), line, column);
}

std::string value_to_string(const Value &value) {
  if (auto *b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (auto *i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (auto *d = std::get_if<double>(&value)) {
    std::string text = format("%.17g", *d);
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
    return text;
  }
  return "\"" + std::get<std::string>(value) + "\"";
}

}  // namespace zf
