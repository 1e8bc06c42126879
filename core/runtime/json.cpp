#include "runtime/json.hpp"

#include "runtime/error.hpp"

#include <cmath>

namespace zf {

namespace {

// The length of the UTF-8 sequence at text[i], or 0 when none starts there (RFC 3629).
size_t utf8_length(const std::string &text, size_t i) {
  const auto byte = [&](size_t k) { return k < text.size() ? static_cast<unsigned char>(text[k]) : 0u; };
  const unsigned lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (length == 0) return 0;
  // The second byte's range excludes overlong forms, surrogates and code points past U+10FFFF.
  const unsigned second = byte(i + 1);
  const unsigned low = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
  const unsigned high = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
  if (second < low || second > high) return 0;
  for (size_t k = 2; k < length; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  return length;
}

}  // namespace

std::string utf8_problem(const std::string &text) {
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_length(text, i);
    if (length == 0) return format("byte 0x%02X at %zu is not UTF-8", static_cast<unsigned char>(text[i]), i);
    i += length;
  }
  return "";
}

std::string as_json_text(const std::string &text) {
  std::string out;
  for (size_t i = 0; i < text.size();) {
    const size_t length = utf8_length(text, i);
    if (length == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
    } else {
      out.append(text, i, length);
      i += length;
    }
  }
  return out;
}

std::string json_escape(const std::string &raw) {
  const std::string text = as_json_text(raw);
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
