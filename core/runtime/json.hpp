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

std::string json_escape(const std::string &text);

}  // namespace zf
