#include "runtime/json.hpp"

#include "runtime/error.hpp"

#include <cmath>

namespace zf {

std::string json_escape(const std::string &text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += format("\\u%04x", c);
        else out += c;
    }
  }
  return out;
}

void JsonWriter::separate() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) text_ += ",";
    first_.back() = false;
  }
}

JsonWriter &JsonWriter::begin_object() {
  separate();
  text_ += "{";
  first_.push_back(true);
  return *this;
}
JsonWriter &JsonWriter::end_object() {
  text_ += "}";
  first_.pop_back();
  return *this;
}
JsonWriter &JsonWriter::begin_array() {
  separate();
  text_ += "[";
  first_.push_back(true);
  return *this;
}
JsonWriter &JsonWriter::end_array() {
  text_ += "]";
  first_.pop_back();
  return *this;
}
JsonWriter &JsonWriter::key(const std::string &name) {
  separate();
  text_ += "\"" + json_escape(name) + "\":";
  after_key_ = true;
  return *this;
}
JsonWriter &JsonWriter::value(const std::string &text) {
  separate();
  text_ += "\"" + json_escape(text) + "\"";
  return *this;
}
JsonWriter &JsonWriter::value(double number) {
  separate();
  text_ += std::isfinite(number) ? format("%.9g", number) : "null";
  return *this;
}
JsonWriter &JsonWriter::value(int64_t number) {
  separate();
  text_ += std::to_string(number);
  return *this;
}
JsonWriter &JsonWriter::value(uint64_t number) {
  separate();
  text_ += std::to_string(number);
  return *this;
}
JsonWriter &JsonWriter::value(bool flag) {
  separate();
  text_ += flag ? "true" : "false";
  return *this;
}

}  // namespace zf
