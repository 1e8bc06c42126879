// json.hpp: a small JSON writer for the run's outputs (steps.jsonl, summary.json, bench JSON).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// Builds one JSON value as text: obj.key(...).value(...), nested with begin_object/end_object.
class JsonWriter {
 public:
  JsonWriter &begin_object();
  JsonWriter &end_object();
  JsonWriter &begin_array();
  JsonWriter &end_array();
  JsonWriter &key(const std::string &name);
  JsonWriter &value(const std::string &text);
  JsonWriter &value(const char *text) { return value(std::string(text)); }
  JsonWriter &value(double number);
  JsonWriter &value(int64_t number);
  JsonWriter &value(uint64_t number);
  JsonWriter &value(int number) { return value(int64_t(number)); }
  JsonWriter &value(bool flag);
  const std::string &str() const { return text_; }

 private:
  void separate();
  std::string text_;
  std::vector<bool> first_;  // per open container: no element yet
  bool after_key_ = false;
};

// `text` as a JSON string in quotes, less the quotes. JSON holds Unicode text only, and zfcore's
// readers (nlohmann) refuse a file with a byte that is not UTF-8: such bytes (a Latin-1 directory
// name in a path) are written as U+FFFD, so every file JsonWriter writes reads back.
std::string json_escape(const std::string &text);

// "" when `text` is UTF-8 (RFC 3629: no overlong forms, surrogates or code points past U+10FFFF),
// else where it is not ("byte 0xE9 at 5 is not UTF-8").
std::string utf8_problem(const std::string &text);

// `text` as a JSON file holds it (json_escape, read back): every byte that is not part of UTF-8
// replaced by U+FFFD. Compare a recorded path with this of the path, not with the path.
std::string as_json_text(const std::string &text);

}  // namespace zf
