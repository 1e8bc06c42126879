// Values of a DeepSpeed config: their types, where they are written (for messages), and "auto",
// the Hugging Face Trainer's placeholder, which is given the value the Trainer fills in by default
// (its TrainingArguments defaults), each with a note that says the value.
#include "config/deepspeed_converter.hpp"

#include "config/plugin_config.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <cmath>

namespace zf::deepspeed {

namespace {

const TrainerFill *fill_of(const std::map<std::string, TrainerFill> &fills, const std::string &path) {
  auto found = fills.find(path);
  return found == fills.end() ? nullptr : &found->second;
}

// What applies where the Trainer derives the value from the run or the model (no default to take).
const std::map<std::string, std::string> &derived_fills() {
  static const std::map<std::string, std::string> derived = {
      {"train_batch_size", "the Trainer fills in per_device_train_batch_size x gradient_accumulation_steps x ranks: "
                           "not set, so train.micro_batch x train.grad_accum x ranks"},
      {"scheduler.params.total_num_steps", "the Trainer fills in the run's length (max_steps): the schedule spans "
                                           "train.steps (100 unless set)"},
      {"zero_optimization.reduce_bucket_size", "the Trainer fills in hidden_size x hidden_size of the model"},
      {"zero_optimization.stage3_prefetch_bucket_size", "the Trainer fills in 0.9 x hidden_size x hidden_size of the "
                                                        "model"},
      {"zero_optimization.stage3_param_persistence_threshold", "the Trainer fills in 10 x hidden_size of the model"}};
  return derived;
}

// Where the Trainer derives the value from the model, which a DeepSpeed config does not name:
// DeepSpeed's own default for the key (deepspeed/runtime/zero/config.py), written out. nullptr
// for a key without one.
const json *deepspeed_default(const std::string &path) {
  static const std::map<std::string, json> defaults = {
      {"zero_optimization.reduce_bucket_size", 500000000},
      {"zero_optimization.stage3_prefetch_bucket_size", 50000000},
      {"zero_optimization.stage3_param_persistence_threshold", 100000}};
  auto found = defaults.find(path);
  return found == defaults.end() ? nullptr : &found->second;
}

}  // namespace

const TrainerFill *trainer_fill(const std::string &path) {
  static const std::map<std::string, TrainerFill> fills = {
      {"train_micro_batch_size_per_gpu", {8, "TrainingArguments.per_device_train_batch_size"}},
      {"gradient_accumulation_steps", {1, "TrainingArguments.gradient_accumulation_steps"}},
      {"gradient_clipping", {1.0, "TrainingArguments.max_grad_norm"}},
      {"optimizer.params.lr", {5e-5, "TrainingArguments.learning_rate"}},
      {"optimizer.params.betas", {json::array({0.9, 0.999}), "TrainingArguments.adam_beta1, adam_beta2"}},
      {"optimizer.params.eps", {1e-8, "TrainingArguments.adam_epsilon"}},
      {"optimizer.params.weight_decay", {0.0, "TrainingArguments.weight_decay"}},
      {"scheduler.params.warmup_min_lr", {0.0, "the Trainer always writes 0"}},
      {"scheduler.params.warmup_max_lr", {5e-5, "TrainingArguments.learning_rate"}},
      {"scheduler.params.warmup_num_steps", {0, "TrainingArguments.warmup_steps"}},
      {"fp16.enabled", {false, "TrainingArguments.fp16"}},
      {"bf16.enabled", {false, "TrainingArguments.bf16"}},
      {"bfloat16.enabled", {false, "TrainingArguments.bf16"}}};
  return fill_of(fills, path);
}

bool has_auto(const json &value) {
  if (value == "auto") return true;
  if (value.is_object())
    for (auto &[key, v] : value.items())
      if (has_auto(v)) return true;
  return false;
}

std::string Converter::at(const std::string &path) const {
  auto found = positions_.find(path);
  return found == positions_.end() ? source_ : format("%s:%d:%d", source_.c_str(), found->second.line, found->second.column);
}

void Converter::fail(const std::string &path, const std::string &message) const { throw Error(at(path) + ": " + message); }

const json *Converter::find(const json &object, const char *key) const {
  return object.is_object() && object.contains(key) ? &object[key] : nullptr;
}

void Converter::expect_object(const json &value, const std::string &path) const {
  if (!value.is_object()) fail(path, path + " must be an object");
}

// Every key of `object` (at `path`) is one of `known`; else an error with the nearest suggested.
void Converter::known_keys(const json &object, const std::string &path, const Keys &known, const std::string &what) const {
  for (auto &[key, v] : object.items()) {
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    const std::string hint = suggest(key, known);
    fail(join(path, key), format("\"%s\" is not %s zfcore knows%s%s", shown(join(path, key)).c_str(), what.c_str(),
                                 hint.empty() ? "" : "; ", hint.c_str()));
  }
}

const json &Converter::resolve(const json &value, const std::string &path) {
  if (value != "auto") return value;
  const TrainerFill *fill = trainer_fill(path);
  if (!fill) return value;  // noted where it is read (is_auto)
  const std::string shown_value = fill->value.is_array()  // betas: (0.9, 0.999)
                                      ? "(" + fill->value[0].dump() + ", " + fill->value[1].dump() + ")"
                                      : fill->value.dump();
  std::string meaning;
  if (path == "scheduler.params.warmup_num_steps") meaning = ": DeepSpeed's scheduler warms up over max(2, 0) = 2 steps";
  if (path.size() > 8 && path.compare(path.size() - 8, 8, ".enabled") == 0) meaning = ": off";
  out_.note(path, format("\"auto\": the Hugging Face Trainer's default, %s (%s)%s",
                         shown_value.c_str(), fill->source.c_str(), meaning.c_str()));
  filled_.push_back(fill->value);
  return filled_.back();
}

bool Converter::is_auto(const json &value, const std::string &path) {
  if (value != "auto") return false;
  auto derived = derived_fills().find(path);
  const json *fallback = deepspeed_default(path);
  out_.note(path, derived == derived_fills().end()
                      ? std::string("\"auto\" (a Hugging Face Trainer value zfcore has no default for): zfcore's "
                                    "default applies (zfcore config --keys and zfcore plugins --params list them)")
                  : fallback ? format("\"auto\": %s, which a DeepSpeed config does not name: DeepSpeed's default "
                                      "for the key, %s, applies", derived->second.c_str(), fallback->dump().c_str())
                             : "\"auto\": " + derived->second);
  return true;
}

std::string Converter::real(const json &value, const std::string &path) {
  if (is_auto(value, path)) {
    const json *fallback = deepspeed_default(path);
    return fallback ? fallback->dump() : "";
  }
  if (!value.is_number()) fail(path, format("%s = %s must be a number", shown(path).c_str(), shown(value.dump()).c_str()));
  if ((value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)) ||
      (value.is_number_float() && !std::isfinite(value.get<double>())))
    fail(path, format("%s = %s is out of range", shown(path).c_str(), shown(value.dump()).c_str()));
  return value.dump();  // the shortest text that reads back the same number; valid TOML
}

// A count: DeepSpeed configs write big ones as 1e9, which is a whole number here.
std::string Converter::integer(const json &value, const std::string &path) {
  const std::string number = real(value, path);
  if (number.empty() || value == "auto" || value.is_number_integer()) return number;
  const double d = value.get<double>();
  if (d != std::floor(d) || std::fabs(d) >= 9.2e18)
    fail(path, format("%s = %s must be a whole number", shown(path).c_str(), number.c_str()));
  return std::to_string(int64_t(d));
}

std::string Converter::text(const json &object, const std::string &path, const char *key, const char *fallback) const {
  if (!object.contains(key)) return fallback;
  if (!object[key].is_string()) fail(join(path, key), join(path, key) + " must be a string");
  return object[key].get<std::string>();
}

std::string Converter::boolean(const json &value, const std::string &path) {
  if (is_auto(value, path)) return "";
  if (!value.is_boolean()) fail(path, path + " must be true or false");
  return value.get<bool>() ? "true" : "false";
}

}  // namespace zf::deepspeed
