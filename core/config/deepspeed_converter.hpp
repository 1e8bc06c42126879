// deepspeed_converter.hpp: the conversion of a DeepSpeed config behind convert_deepspeed
// (deepspeed.hpp), in three files by what they convert: deepspeed.cpp (the engine's keys: ZeRO,
// offload, ZenFlow, precision), deepspeed_training.cpp (optimizer and scheduler) and
// deepspeed_auto.cpp (the Hugging Face Trainer's "auto" values).
#pragma once

#include "config/json_keys.hpp"
#include "config/deepspeed_keys.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zf::deepspeed {

using nlohmann::json;

// A name or value from the JSON as messages and comments show it (control characters as '?').
std::string shown(const std::string &text);
// A TOML basic string holding `text`.
std::string toml_string(const std::string &text);
std::string join(const std::string &path, const std::string &key);

// TOML tables, each a list of (key, value) in the order first set, and the notes.
struct Toml {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
  std::vector<std::string> notes;  // "ds.key: what happens"

  // A key set twice keeps the last value. An empty value sets nothing.
  void set(const std::string &table, const std::string &key, const std::string &value);
  bool unset(const std::string &table, const std::string &key);  // true when there was one
  bool has(const std::string &table, const std::string &key) const;
  void note(const std::string &key, const std::string &what) { notes.push_back(shown(key) + ": " + what); }
  std::string text(const std::string &source) const;
};

// The Hugging Face Trainer's value for a DeepSpeed key it fills in ("auto"), from its
// TrainingArguments defaults.
struct TrainerFill {
  json value;          // what the Trainer writes there by default; null when it depends on the run
  std::string source;  // where the Trainer takes it from ("TrainingArguments.learning_rate")
};
// The fill of `path` ("optimizer.params.lr"); nullptr for a key the Trainer does not fill.
const TrainerFill *trainer_fill(const std::string &path);
// Whether the config holds "auto" anywhere: it is written for the Hugging Face Trainer.
bool has_auto(const json &value);

class Converter {
 public:
  Converter(std::string source, std::map<std::string, TextPosition> positions)
      : source_(std::move(source)), positions_(std::move(positions)) {}
  Toml convert(const json &config);

 private:
  // deepspeed.cpp
  void top_level(const std::string &key, const json &value);
  void precision(const json &config);
  void data_types(const json &value);
  void zero_optimization(const json &zero);
  std::string offload_optimizer(const json *offload);
  std::string device_of(const json &object, const std::string &name);
  void offload_param(const json &value, const std::string &offload);
  void aio_notes();
  void zenflow(const json &value, const std::string &offload);
  void check_combinations(const json *zero);

  // deepspeed_training.cpp
  void optimizer(const json *opt);
  void scheduler(const json &value);
  void trainer_schedule();  // a Hugging Face Trainer config without a scheduler
  void schedule_range();    // warmup_min_lr against the peak, once the optimizer's lr is known

  // deepspeed_values.cpp: values, their locations and "auto"
  std::string at(const std::string &path) const;  // "ds.json:7:5", or the file alone
  [[noreturn]] void fail(const std::string &path, const std::string &message) const;
  const json *find(const json &object, const char *key) const;
  void expect_object(const json &value, const std::string &path) const;
  void known_keys(const json &object, const std::string &path, const Keys &known, const std::string &what) const;
  // "auto" at `path`: the Trainer's default replaces it (a note says which), or, where the Trainer
  // derives it from the run, nothing is set and a note says what applies. Returns the value to use.
  const json &resolve(const json &value, const std::string &path);
  bool is_auto(const json &value, const std::string &path);  // "auto" left unset (noted)
  std::string real(const json &value, const std::string &path);
  std::string integer(const json &value, const std::string &path);
  std::string text(const json &object, const std::string &path, const char *key, const char *fallback) const;
  std::string boolean(const json &value, const std::string &path);

  std::string source_;
  std::map<std::string, TextPosition> positions_;
  Toml out_;
  int64_t stage_ = 0;
  const json *aio_ = nullptr;
  bool nvme_ = false;            // offload_optimizer.device = "nvme"
  bool trainer_ = false;         // a Hugging Face Trainer config ("auto" somewhere)
  bool bf16_ = false;            // the model computes in bfloat16
  std::string warmup_max_lr_;    // the scheduler's peak, which replaces optimizer.params.lr
  std::string warmup_min_lr_;    // the scheduler's start (WarmupLR, WarmupDecayLR)
  std::string schedule_type_;    // scheduler.type
  std::deque<json> filled_;      // the Trainer's values that replaced "auto" (kept alive)
};

}  // namespace zf::deepspeed
