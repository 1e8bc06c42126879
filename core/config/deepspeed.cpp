#include "config/deepspeed.hpp"

#include "config/deepspeed_keys.hpp"
#include "config/json_keys.hpp"
#include "config/plugin_config.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zf {

namespace {

using nlohmann::json;
using namespace deepspeed;

// A name or value from the JSON as messages and comments show it: an excerpt, its control
// characters as '?' (a newline would end a TOML comment and start a line of TOML).
std::string shown(const std::string &text) {
  std::string out = excerpt(text, 80);
  for (char &c : out)
    if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
  return out;
}

// A TOML basic string holding `text`: JSON's escapes are TOML's, but TOML also escapes DEL.
std::string toml_string(const std::string &text) {
  std::string out;
  for (char c : json(text).dump()) out += c == 0x7f ? std::string("\\u007F") : std::string(1, c);
  return out;
}

std::string join(const std::string &path, const std::string &key) { return path.empty() ? key : path + "." + key; }

// TOML tables, each a list of (key, value) in the order first set.
struct Toml {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
  std::vector<std::string> notes;  // "ds.key: what happens"

  // A key set twice keeps the last value (TOML allows a key once: offload_param's cpu_full
  // replaces offload_optimizer's plugin, ...). An empty value ("auto") sets nothing.
  void set(const std::string &table, const std::string &key, const std::string &value) {
    if (value.empty()) return;
    auto &entries = tables[table];
    for (auto &entry : entries)
      if (entry.first == key) {
        entry.second = value;
        return;
      }
    entries.emplace_back(key, value);
  }
  // Removes a key set before; true when there was one.
  bool unset(const std::string &table, const std::string &key) {
    auto &entries = tables[table];
    auto found = std::find_if(entries.begin(), entries.end(), [&](const auto &entry) { return entry.first == key; });
    if (found == entries.end()) return false;
    entries.erase(found);
    return true;
  }
  void note(const std::string &key, const std::string &what) { notes.push_back(shown(key) + ": " + what); }

  std::string text(const std::string &source) const {
    std::string out = "# Converted from " + shown(source) + " by zfcore convert.\n";
    if (!notes.empty()) {
      out += "# DeepSpeed keys without a zfcore key of their own:\n";
      for (const std::string &n : notes) out += "#   " + n + "\n";
    }
    out += "# A DeepSpeed config names no model and no data: add [model] (preset, init_from or the shape)\n"
           "# and [data] (see examples/).\n";
    for (const char *table : {"run", "model", "train", "optimizer", "stage", "offload", "zenflow"}) {
      auto found = tables.find(table);
      if (found == tables.end()) continue;
      out += std::string("\n[") + table + "]\n";
      for (const auto &[key, value] : found->second) out += key + " = " + value + "\n";
    }
    return out;
  }
};

class Converter {
 public:
  Converter(std::string source, std::map<std::string, TextPosition> positions)
      : source_(std::move(source)), positions_(std::move(positions)) {}

  Toml convert(const json &config) {
    ZF_REQUIRE(config.is_object(), "%s: the config must be an object", source_.c_str());
    known_keys(config, "", kTopLevel, "a DeepSpeed config key");
    const json *zero = find(config, "zero_optimization");
    json legacy;  // "zero_optimization": true, DeepSpeed's first spelling of stage 1
    if (zero && zero->is_boolean()) {
      legacy = json{{"stage", zero->get<bool>() ? 1 : 0}};
      out_.note("zero_optimization", std::string(zero->get<bool>() ? "true" : "false") +
                                         ": DeepSpeed's old spelling of {\"stage\": " + (zero->get<bool>() ? "1}" : "0}"));
      zero = &legacy;
    }
    if (zero) expect_object(*zero, "zero_optimization");
    if (zero) known_keys(*zero, "zero_optimization", kZero, "a zero_optimization key");
    const std::string stage_text = zero && zero->contains("stage") ? integer((*zero)["stage"], "zero_optimization.stage") : "0";
    stage_ = stage_text.empty() ? 0 : std::stoll(stage_text);
    if (stage_ < 0 || stage_ > 3)
      fail("zero_optimization.stage", format("zero_optimization.stage = %s: DeepSpeed's stages are 0 to 3",
                                             stage_text.c_str()));
    for (auto &[key, value] : config.items()) top_level(key, value);
    precision(config);
    if (const json *aio = find(config, "aio")) aio_ = aio;
    if (zero) zero_optimization(*zero);
    aio_notes();
    optimizer(find(config, "optimizer"));
    return out_;
  }

 private:
  void top_level(const std::string &key, const json &value) {
    if (key == "train_micro_batch_size_per_gpu") out_.set("train", "micro_batch", integer(value, key));
    else if (key == "gradient_accumulation_steps") out_.set("train", "grad_accum", integer(value, key));
    else if (key == "train_batch_size") out_.set("train", "global_batch", integer(value, key));
    else if (key == "gradient_clipping") out_.set("train", "clip_grad_norm", real(value, key));
    else if (key == "steps_per_print") out_.set("run", "log_every", integer(value, key));
    else if (key == "wall_clock_breakdown") out_.set("run", "wall_clock_breakdown", boolean(value, key));
    else if (key == "scheduler") scheduler(value);
    else if (key == "bf16" || key == "bfloat16" || key == "fp16" || key == "zero_optimization" || key == "optimizer" ||
             key == "aio") {
      // below, once the whole config is known
    } else {
      out_.note(key, ignored_reason(key));
    }
  }

  static std::string ignored_reason(const std::string &key) {
    if (key == "activation_checkpointing") return "ignored: set model.activation_checkpointing = true to recompute layers";
    if (key == "seed") return "ignored: the seed is run.seed";
    if (key == "tensorboard" || key == "wandb" || key == "csv_monitor")
      return "ignored: every run writes steps.jsonl, steps.csv, summary.json, report.html and TensorBoard event files "
             "(OUTPUT_DIR/tensorboard; run.tensorboard = false turns them off)";
    if (key == "zero_allow_untested_optimizer" || key == "zero_force_ds_cpu_optimizer")
      return "ignored: every optimizer plugin works with every stage";
    if (key == "amp") return "ignored: model.dtype = \"bfloat16\" is zfcore's mixed precision";
    if (key == "checkpoint") return "ignored: checkpoints are [checkpoint] (every, keep, resume)";
    return "ignored: no zfcore equivalent";
  }

  // bf16 (or its old name bfloat16) and fp16: model.dtype. Both off is fp32, DeepSpeed's default.
  void precision(const json &config) {
    bool bf16 = false, fp16 = false, any = false;
    for (const char *key : {"bf16", "bfloat16", "fp16"}) {
      const json *block = find(config, key);
      if (!block) continue;
      any = true;
      expect_object(*block, key);
      known_keys(*block, key, std::string(key) == "fp16" ? kFp16 : kBf16, std::string("a ") + key + " key");
      bool on = block->contains("enabled") && boolean((*block)["enabled"], join(key, "enabled")) == "true";
      (std::string(key) == "fp16" ? fp16 : bf16) |= on;
      for (auto &[sub, v] : block->items())
        if (sub != "enabled")
          out_.note(join(key, sub), on ? "ignored: bf16 needs no loss scaling or overflow checks"
                                       : std::string("ignored: ") + key + " is off");
    }
    if (bf16 && fp16) fail("fp16", "bf16 and fp16 are both enabled: DeepSpeed takes one of them");
    if (fp16) out_.note("fp16", "zfcore computes in bf16 (model.dtype = \"bfloat16\", no loss scaling) instead of fp16");
    if (any) out_.set("model", "dtype", bf16 || fp16 ? "\"bfloat16\"" : "\"float32\"");
  }

  void zero_optimization(const json &zero) {
    out_.set("stage", "plugin", "\"zero" + std::to_string(stage_) + "\"");
    const std::string offload = offload_optimizer(find(zero, "offload_optimizer"));
    nvme_ = offload == "nvme";
    for (auto &[key, value] : zero.items()) {
      const std::string name = "zero_optimization." + key;
      if (key == "stage" || key == "offload_optimizer") continue;
      if (key == "overlap_comm") out_.set("stage", "overlap_comm", boolean(value, name));
      else if (key == "contiguous_gradients" && stage_ > 0) out_.set("stage", key, boolean(value, name));
      else if (key == "reduce_bucket_size") out_.set("stage", key, integer(value, name));  // elements, every stage
      else if (key == "allgather_bucket_size" && stage_ > 0) out_.set("stage", key, integer(value, name));
      else if (key == "stage3_prefetch_bucket_size" && stage_ == 3) out_.set("stage", "prefetch_bucket_size", integer(value, name));
      else if (key == "stage3_param_persistence_threshold" && stage_ == 3)
        out_.set("stage", "param_persistence_threshold", integer(value, name));
      else if (key == "stage3_max_live_parameters" && stage_ == 3) out_.set("stage", "max_live_parameters", integer(value, name));
      else if (key == "zenflow") zenflow(value, offload);
      else if (key == "offload_param") offload_param(value, offload);
      else
        out_.note(name, stage_ == 3 || key.rfind("stage3_", 0) != 0 ? "ignored: no zfcore equivalent"
                                                                      : "ignored: applies to stage 3 only");
    }
  }

  // The offload plugin the config asks for ("" = none).
  std::string offload_optimizer(const json *offload) {
    if (!offload) return "";
    const std::string name = "zero_optimization.offload_optimizer";
    expect_object(*offload, name);
    known_keys(*offload, name, kOffloadOptimizer, "an offload_optimizer key");
    const std::string device = device_of(*offload, name);
    if (device == "none") return "";
    const std::string plugin = device == "cpu" ? "cpu_optimizer" : "nvme";
    out_.set("offload", "plugin", "\"" + plugin + "\"");
    if (offload->contains("pin_memory")) out_.set("offload", "pin_memory", boolean((*offload)["pin_memory"], name + ".pin_memory"));
    if (device == "nvme") {
      if (!offload->contains("nvme_path") || !(*offload)["nvme_path"].is_string())
        fail(name + ".device", name + ".device = \"nvme\" needs nvme_path (a directory on the SSD)");
      out_.set("offload", "path", toml_string((*offload)["nvme_path"].get<std::string>()));
    }
    // ZeRO-Offload++: the share of the optimizer state updated on the CPU, the rest on the GPU.
    if (offload->contains("ratio")) out_.set("offload", "ratio", real((*offload)["ratio"], name + ".ratio"));
    for (const char *key : {"buffer_count", "fast_init", "pipeline_read", "pipeline_write", "pipeline"})
      if (offload->contains(key)) out_.note(name + "." + key, "ignored: zfcore streams three tiles per state tensor");
    return plugin;
  }

  std::string device_of(const json &object, const std::string &name) {
    const std::string device = text(object, name, "device", "none");
    if (device != "none" && device != "cpu" && device != "nvme")
      fail(name + ".device", format("%s.device = \"%s\": expected none, cpu or nvme", name.c_str(), shown(device).c_str()));
    return device;
  }

  // Parameters in host memory: cpu_full, which keeps the master and optimizer state there too; beside
  // NVMe optimizer state, the nvme plugin's offload_params (ZeRO-Infinity).
  void offload_param(const json &value, const std::string &offload) {
    const std::string name = "zero_optimization.offload_param";
    expect_object(value, name);
    known_keys(value, name, kOffloadParam, "an offload_param key");
    const std::string device = device_of(value, name);
    if (device == "none") return;
    if (device == "nvme")
      out_.note(name + ".device", "\"nvme\" is host memory here: zfcore keeps parameters in pinned host memory, "
                                  "never on disk");
    if (offload == "nvme") {
      out_.set("offload", "offload_params", "true");
    } else {
      out_.set("offload", "plugin", "\"cpu_full\"");
      if (offload.empty())
        out_.note(name, "offload.plugin = \"cpu_full\" keeps the master and optimizer state in host memory too");
    }
    if (out_.unset("offload", "ratio"))
      out_.note("zero_optimization.offload_optimizer.ratio",
                "ignored: with offload_param the parameters live in host memory, and the whole optimizer shard is "
                "updated there");
    if (value.contains("pin_memory")) out_.set("offload", "pin_memory", boolean(value["pin_memory"], name + ".pin_memory"));
    for (const char *key : {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path"})
      if (value.contains(key))
        out_.note(name + "." + key, "ignored: blocks are copied ahead up to offload.prefetch_size elements");
  }

  // DeepSpeed's async I/O settings: queue_depth is the nvme plugin's; the rest have no equivalent.
  void aio_notes() {
    if (!aio_) return;
    expect_object(*aio_, "aio");
    known_keys(*aio_, "aio", kAio, "an aio key");
    for (auto &[key, value] : aio_->items()) {
      const std::string name = "aio." + key;
      if (!nvme_) out_.note(name, "ignored: applies to NVMe offload only (offload_optimizer.device = \"nvme\")");
      else if (key == "queue_depth") out_.set("offload", "queue_depth", integer(value, name));
      else if (key == "block_size") out_.note(name, "ignored: the nvme plugin's requests are 4 MiB");
      else if (key == "intra_op_parallelism" || key == "thread_count")
        out_.note(name, "ignored: io_uring submits from one thread (offload.io_backend = \"threads\" uses up to 16)");
      else if (key == "single_submit") out_.note(name, "ignored: requests are submitted in batches");
      else if (key == "overlap_events") out_.note(name, "ignored: reads and writes always overlap, queue_depth in flight");
      else out_.note(name, "ignored: no GPUDirect Storage; state goes through pinned host memory");
    }
  }

  void zenflow(const json &value, const std::string &offload) {
    const std::string name = "zero_optimization.zenflow";
    expect_object(value, name);
    known_keys(value, name, kZenFlow, "a ZenFlow key");
    if (offload.empty())
      fail(name, name + " needs zero_optimization.offload_optimizer.device = \"cpu\" or \"nvme\"");
    out_.tables["zenflow"];  // the table turns ZenFlow on, even empty
    // DeepSpeed's semantics: the whole interval's CPU update at its end, used one interval later.
    out_.set("zenflow", "schedule", toml_string("deepspeed"));
    out_.set("zenflow", "topk_ratio", "0.1");  // DeepSpeed's default, where zfcore's is "auto"
    for (auto &[key, v] : value.items()) {
      const std::string full = name + "." + key;
      if (key == "topk_ratio" || key == "auto_ratio" || key == "pt_reserved_cores_perc")
        out_.set("zenflow", key, real(v, full));
      else if (key == "update_interval" || key == "select_interval")
        out_.set("zenflow", key, v.is_string() ? toml_string(v.get<std::string>()) : integer(v, full));
      else if (key == "select_strategy") out_.set("zenflow", key, toml_string(text(value, name, "select_strategy", "")));
      else if (key == "overlap_step") out_.set("zenflow", key, boolean(v, full));
      else if (key == "full_warm_up_rounds") out_.set("zenflow", key, integer(v, full));
      else if (key == "offload") out_.set("zenflow", "offload_selected_state", boolean(v, full));
      else out_.note(full, "ignored: zfcore knows the epoch from the data");  // steps_per_epoch
    }
  }

  void optimizer(const json *opt) {
    const bool offloaded = out_.tables.count("offload") != 0;
    if (!opt) {  // DeepSpeed then steps the optimizer the training script hands it
      out_.set("optimizer", "plugin", offloaded ? "\"cpu_adam\"" : "\"gpu_adam\"");
      out_.note("optimizer", "not in the config (DeepSpeed would use the training script's): AdamW, with [optimizer]'s "
                             "defaults; set lr and the rest there");
      if (!warmup_max_lr_.empty()) out_.set("optimizer", "lr", warmup_max_lr_);
      return;
    }
    expect_object(*opt, "optimizer");
    known_keys(*opt, "optimizer", {"type", "params"}, "an optimizer key");
    const std::string type = text(*opt, "optimizer", "type", "AdamW");
    std::string plugin;
    if (type == "Adam" || type == "AdamW" || type == "adam" || type == "adamw" || type == "FusedAdam" ||
        type == "CPUAdam" || type == "DeepSpeedCPUAdam")
      plugin = offloaded ? "cpu_adam" : "gpu_adam";
    else if (type == "Lion" || type == "lion") plugin = "cpu_lion";
    else if (type == "Adagrad" || type == "adagrad") plugin = "cpu_adagrad";
    else fail("optimizer.type", format("optimizer.type = \"%s\": zfcore has Adam/AdamW, Lion and Adagrad", shown(type).c_str()));
    if (!offloaded && plugin != "gpu_adam")
      fail("optimizer.type", format("optimizer.type = \"%s\" runs on the CPU in zfcore: add "
                                    "zero_optimization.offload_optimizer (device \"cpu\")", shown(type).c_str()));
    out_.set("optimizer", "plugin", "\"" + plugin + "\"");
    const json params = opt->value("params", json::object());
    expect_object(params, "optimizer.params");
    known_keys(params, "optimizer.params", kOptimizerParams, "an optimizer parameter");
    for (auto &[key, v] : params.items()) {
      const std::string full = "optimizer.params." + key;
      if (is_auto(v, full)) continue;
      if (key == "lr" && !warmup_max_lr_.empty()) {
        out_.note(full, "replaced by the scheduler's warmup_max_lr " + warmup_max_lr_ + ", as in DeepSpeed");
      } else if (key == "lr" || key == "eps" || key == "weight_decay") {
        out_.set("optimizer", key, real(v, full));
      } else if (key == "betas") {
        if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
          fail(full, full + " must be [beta1, beta2]");
        out_.set("optimizer", "beta1", real(v[0], full));
        out_.set("optimizer", "beta2", real(v[1], full));
      } else if (key == "adam_w_mode" && plugin == "cpu_adam") {
        out_.set("optimizer", key, boolean(v, full));
      } else {
        out_.note(full, "ignored: no such parameter of " + plugin);
      }
    }
    if (!warmup_max_lr_.empty()) out_.set("optimizer", "lr", warmup_max_lr_);
  }

  // DeepSpeed's three warm-up schedulers, with DeepSpeed's defaults where a parameter is missing:
  // 1000 warm-up steps, a logarithmic warm-up, WarmupLR/WarmupDecayLR's peak 0.001 (it replaces
  // the optimizer's lr), WarmupCosineLR's floor cos_min_ratio 1e-4.
  void scheduler(const json &value) {
    expect_object(value, "scheduler");
    known_keys(value, "scheduler", {"type", "params"}, "a scheduler key");
    const std::string type = text(value, "scheduler", "type", "");
    auto known = kSchedulers.find(type);
    if (known == kSchedulers.end())
      fail("scheduler.type", format("scheduler.type = \"%s\": zfcore has WarmupLR, WarmupDecayLR and WarmupCosineLR",
                                    shown(type).c_str()));
    const json params = value.value("params", json::object());
    expect_object(params, "scheduler.params");
    known_keys(params, "scheduler.params", known->second, "a " + type + " parameter");
    const std::string schedule = type == "WarmupLR" ? "constant" : type == "WarmupDecayLR" ? "linear" : "cosine";
    out_.set("train", "lr_schedule", "\"" + schedule + "\"");
    out_.set("train", "warmup_steps", "1000");
    out_.set("train", "warmup_type", "\"log\"");
    if (schedule == "linear") out_.set("train", "min_lr_ratio", "0.0");  // WarmupDecayLR decays to 0
    if (schedule == "cosine") out_.set("train", "min_lr_ratio", "0.0001");
    if (schedule != "cosine") warmup_max_lr_ = "0.001";
    if (schedule != "constant" && !params.contains("total_num_steps"))
      fail("scheduler.type", type + " needs scheduler.params.total_num_steps (the length of its decay)");
    for (auto &[key, v] : params.items()) {
      const std::string full = "scheduler.params." + key;
      if (key == "warmup_num_steps") out_.set("train", "warmup_steps", integer(v, full));
      else if (key == "total_num_steps") out_.set("train", "steps", integer(v, full));
      else if (key == "warmup_max_lr") warmup_max_lr_ = real(v, full);
      else if (key == "cos_min_ratio") out_.set("train", "min_lr_ratio", real(v, full));
      else if (key == "warmup_type") {
        const std::string warmup = text(params, "scheduler.params", "warmup_type", "");
        if (warmup != "log" && warmup != "linear")
          fail(full, format("%s = \"%s\": DeepSpeed's warm-up types are log and linear", full.c_str(), shown(warmup).c_str()));
        out_.set("train", "warmup_type", toml_string(warmup));
      } else if (key == "warmup_min_lr" || key == "warmup_min_ratio") {
        if (!real(v, full).empty() && v.get<double>() != 0) out_.note(full, "ignored: zfcore warms up from 0");
      } else {
        out_.note(full, "ignored: a resumed run continues the schedule from its checkpoint");  // last_batch_iteration
      }
    }
  }

  // ---- locations and values ----
  // "ds.json:7:5", where the key at `path` is written (the file alone when it is not found).
  std::string at(const std::string &path) const {
    auto found = positions_.find(path);
    return found == positions_.end() ? source_ : format("%s:%d:%d", source_.c_str(), found->second.line, found->second.column);
  }
  [[noreturn]] void fail(const std::string &path, const std::string &message) const {
    throw Error(at(path) + ": " + message);
  }
  const json *find(const json &object, const char *key) const {
    return object.is_object() && object.contains(key) ? &object[key] : nullptr;
  }
  void expect_object(const json &value, const std::string &path) const {
    if (!value.is_object()) fail(path, path + " must be an object");
  }
  // Every key of `object` (at `path`) is one of `known`; else an error with the nearest suggested.
  void known_keys(const json &object, const std::string &path, const Keys &known, const std::string &what) const {
    for (auto &[key, v] : object.items()) {
      if (std::find(known.begin(), known.end(), key) != known.end()) continue;
      const std::string hint = suggest(key, known);
      fail(join(path, key), format("\"%s\" is not %s zfcore knows%s%s", shown(join(path, key)).c_str(), what.c_str(),
                                   hint.empty() ? "" : "; ", hint.c_str()));
    }
  }
  // "auto" is the Hugging Face Trainer's placeholder: zfcore's default applies, as a note says.
  bool is_auto(const json &value, const std::string &path) {
    if (value != "auto") return false;
    out_.note(path, "\"auto\" (the Hugging Face Trainer fills it in): zfcore's default applies");
    return true;
  }
  std::string real(const json &value, const std::string &path) {
    if (is_auto(value, path)) return "";
    if (!value.is_number()) fail(path, format("%s = %s must be a number", shown(path).c_str(), shown(value.dump()).c_str()));
    if ((value.is_number_unsigned() && value.get<uint64_t>() > uint64_t(INT64_MAX)) ||
        (value.is_number_float() && !std::isfinite(value.get<double>())))
      fail(path, format("%s = %s is out of range", shown(path).c_str(), shown(value.dump()).c_str()));
    return value.dump();  // the shortest text that reads back the same number; valid TOML
  }
  // A count: DeepSpeed configs write big ones as 1e9, which is a whole number here.
  std::string integer(const json &value, const std::string &path) {
    const std::string number = real(value, path);
    if (number.empty() || value.is_number_integer()) return number;
    const double d = value.get<double>();
    if (d != std::floor(d) || std::fabs(d) >= 9.2e18)
      fail(path, format("%s = %s must be a whole number", shown(path).c_str(), number.c_str()));
    return std::to_string(int64_t(d));
  }
  // A string member of `object` (`fallback` when it has none).
  std::string text(const json &object, const std::string &path, const char *key, const char *fallback) const {
    if (!object.contains(key)) return fallback;
    if (!object[key].is_string()) fail(join(path, key), join(path, key) + " must be a string");
    return object[key].get<std::string>();
  }
  std::string boolean(const json &value, const std::string &path) {
    if (is_auto(value, path)) return "";
    if (!value.is_boolean()) fail(path, path + " must be true or false");
    return value.get<bool>() ? "true" : "false";
  }

  std::string source_;
  std::map<std::string, TextPosition> positions_;
  Toml out_;
  int64_t stage_ = 0;
  const json *aio_ = nullptr;
  bool nvme_ = false;  // offload_optimizer.device = "nvme"
  std::string warmup_max_lr_;
};

}  // namespace

DeepSpeedConversion convert_deepspeed(const std::string &json_text, const std::string &source) {
  const json config = parse_json(json_text, source);
  Toml toml = Converter(source, json_key_positions(json_text)).convert(config);
  return DeepSpeedConversion{toml.text(source), toml.notes};
}

std::string deepspeed_to_toml(const std::string &json_text, const std::string &source) {
  return convert_deepspeed(json_text, source).toml;
}

}  // namespace zf
