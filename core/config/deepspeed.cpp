#include "config/deepspeed.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace zf {

namespace {

using nlohmann::json;

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

// TOML tables, each a list of (key, value) in the order first set.
struct Toml {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> tables;
  std::vector<std::string> notes;  // "ds.key: what happens"

  // A key set twice keeps the last value (TOML allows a key once: offload_param's cpu_full
  // replaces offload_optimizer's plugin, bf16 and fp16 both set model.dtype, ...).
  void set(const std::string &table, const std::string &key, const std::string &value) {
    auto &entries = tables[table];
    for (auto &entry : entries)
      if (entry.first == key) {
        entry.second = value;
        return;
      }
    entries.emplace_back(key, value);
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
  explicit Converter(std::string source) : source_(std::move(source)) {}

  Toml convert(const json &config) {
    expect_object(config, "");
    const json *zero = find(config, "zero_optimization");
    int64_t stage = zero ? integer(*zero, "zero_optimization", "stage", 0) : 0;
    ZF_REQUIRE(stage >= 0 && stage <= 3, "%s: zero_optimization.stage = %lld: DeepSpeed's stages are 0 to 3",
               source_.c_str(), (long long)stage);
    stage_ = int(stage);
    for (auto &[key, value] : config.items()) top_level(key, value);
    if (zero) zero_optimization(*zero);
    optimizer(find(config, "optimizer"));
    return out_;
  }

 private:
  void top_level(const std::string &key, const json &value) {
    if (key == "train_micro_batch_size_per_gpu") out_.set("train", "micro_batch", number(value, key));
    else if (key == "gradient_accumulation_steps") out_.set("train", "grad_accum", number(value, key));
    else if (key == "gradient_clipping") out_.set("train", "clip_grad_norm", number(value, key));
    else if (key == "steps_per_print") out_.set("run", "log_every", number(value, key));
    else if (key == "wall_clock_breakdown") out_.set("run", "wall_clock_breakdown", boolean(value, key));
    else if (key == "train_batch_size")
      out_.note(key, "not a key here: the global batch is train.micro_batch x train.grad_accum x ranks");
    else if (key == "bf16") {
      sub_keys(value, key, {"enabled", "immediate_grad_update", "check_grad_overflow"});
      if (enabled_value(value)) out_.set("model", "dtype", "\"bfloat16\"");
    } else if (key == "fp16") {
      sub_keys(value, key, {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window",
                            "hysteresis", "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"});
      if (enabled_value(value)) {
        out_.set("model", "dtype", "\"bfloat16\"");
        out_.note(key, "zfcore computes in bf16 (no loss scaling needed) instead of fp16");
      }
    } else if (key == "zero_optimization" || key == "optimizer") {
      // below, once the offload is known
    } else if (key == "scheduler") {
      scheduler(value);
    } else if (key == "aio") {
      sub_keys(value, key, {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events",
                            "use_gds"});
      if (value.contains("queue_depth")) aio_queue_depth_ = number(value["queue_depth"], "aio.queue_depth");
      out_.note(key, "queue_depth goes to offload.queue_depth (nvme); requests are 4 MiB, io_uring");
    } else if (key == "zero_allow_untested_optimizer" || key == "prescale_gradients" ||
               key == "gradient_predivide_factor" || key == "communication_data_type" ||
               key == "sparse_gradients" || key == "dump_state" || key == "memory_breakdown" ||
               key == "flops_profiler" || key == "tensorboard" || key == "wandb" || key == "csv_monitor" ||
               key == "comms_logger" || key == "activation_checkpointing" || key == "seed" ||
               key == "checkpoint" || key == "data_efficiency" || key == "elasticity" || key == "autotuning") {
      out_.note(key, ignored_reason(key));
    } else {
      throw Error(format("%s: \"%s\" is not a DeepSpeed config key zfcore knows", source_.c_str(), shown(key).c_str()));
    }
  }

  static std::string ignored_reason(const std::string &key) {
    if (key == "activation_checkpointing") return "ignored: set model.activation_checkpointing = true to recompute layers";
    if (key == "seed") return "ignored: the seed is run.seed";
    if (key == "tensorboard" || key == "wandb" || key == "csv_monitor")
      return "ignored: every run writes steps.jsonl, steps.csv and summary.json";
    if (key == "zero_allow_untested_optimizer") return "ignored: every optimizer plugin works with every stage";
    return "ignored: no zfcore equivalent";
  }

  void zero_optimization(const json &zero) {
    expect_object(zero, "zero_optimization");
    out_.set("stage", "plugin", "\"zero" + std::to_string(stage_) + "\"");
    const std::string offload = offload_optimizer(find(zero, "offload_optimizer"));
    for (auto &[key, value] : zero.items()) {
      const std::string name = "zero_optimization." + shown(key);
      if (key == "stage" || key == "offload_optimizer") continue;
      if (key == "overlap_comm") out_.set("stage", "overlap_comm", boolean(value, name));
      else if (key == "contiguous_gradients" && stage_ > 0) out_.set("stage", key, boolean(value, name));
      else if (key == "reduce_bucket_size") out_.set("stage", key, number(value, name));  // elements, every stage
      else if (key == "allgather_bucket_size" && stage_ > 0) out_.set("stage", key, number(value, name));
      else if (key == "stage3_prefetch_bucket_size" && stage_ == 3) out_.set("stage", "prefetch_bucket_size", number(value, name));
      else if (key == "stage3_param_persistence_threshold" && stage_ == 3)
        out_.set("stage", "param_persistence_threshold", number(value, name));
      else if (key == "stage3_max_live_parameters" && stage_ == 3) out_.set("stage", "max_live_parameters", number(value, name));
      else if (key == "zenflow") zenflow(value, offload);
      else if (key == "offload_param") offload_param(value, offload);
      else if (key == "allgather_partitions" || key == "reduce_scatter" || key == "round_robin_gradients" ||
                 key == "sub_group_size" || key == "load_from_fp32_weights" || key == "elastic_checkpoint" ||
                 key == "ignore_unused_parameters" || key == "stage3_max_reuse_distance" ||
                 key == "stage3_gather_16bit_weights_on_model_save" || key == "stage3_gather_fp16_weights_on_model_save" ||
                 key == "contiguous_gradients" || key == "allgather_bucket_size" || key.rfind("stage3_", 0) == 0 ||
                 key == "zero_hpz_partition_size" || key == "zero_quantized_weights" || key == "zero_quantized_gradients") {
        out_.note(name, stage_ == 3 || key.rfind("stage3_", 0) != 0 ? "ignored: no zfcore equivalent"
                                                                      : "ignored: applies to stage 3 only");
      } else {
        throw Error(format("%s: \"%s\" is not a zero_optimization key zfcore knows", source_.c_str(), name.c_str()));
      }
    }
  }

  // The offload plugin the config asks for ("" = none).
  std::string offload_optimizer(const json *offload) {
    if (!offload) return "";
    const std::string name = "zero_optimization.offload_optimizer";
    sub_keys(*offload, name, {"device", "nvme_path", "pin_memory", "buffer_count", "fast_init", "pipeline_read",
                              "pipeline_write", "pipeline", "ratio"});
    const std::string device = text(*offload, name, "device", "none");
    ZF_REQUIRE(device == "none" || device == "cpu" || device == "nvme",
               "%s: %s.device = \"%s\": expected none, cpu or nvme", source_.c_str(), name.c_str(),
               shown(device).c_str());
    if (device == "none") return "";
    const std::string plugin = device == "cpu" ? "cpu_optimizer" : "nvme";
    out_.set("offload", "plugin", "\"" + plugin + "\"");
    if (offload->contains("pin_memory")) out_.set("offload", "pin_memory", boolean((*offload)["pin_memory"], name + ".pin_memory"));
    if (device == "nvme") {
      ZF_REQUIRE(offload->contains("nvme_path") && (*offload)["nvme_path"].is_string(),
                 "%s: %s.device = \"nvme\" needs nvme_path (a directory on the SSD)", source_.c_str(), name.c_str());
      out_.set("offload", "path", toml_string((*offload)["nvme_path"].get<std::string>()));
      if (!aio_queue_depth_.empty()) out_.set("offload", "queue_depth", aio_queue_depth_);
    }
    for (const char *key : {"buffer_count", "fast_init", "pipeline_read", "pipeline_write", "pipeline", "ratio"})
      if (offload->contains(key)) out_.note(name + "." + key, "ignored: zfcore streams three tiles per state tensor");
    return plugin;
  }

  // Parameters in host memory: cpu_full, which keeps the master and optimizer state there too.
  void offload_param(const json &value, const std::string &offload) {
    const std::string name = "zero_optimization.offload_param";
    sub_keys(value, name, {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"});
    const std::string device = text(value, name, "device", "none");
    ZF_REQUIRE(device == "none" || device == "cpu" || device == "nvme",
               "%s: %s.device = \"%s\": expected none, cpu or nvme", source_.c_str(), name.c_str(),
               shown(device).c_str());
    if (device == "none") return;
    if (device == "nvme" || offload == "nvme") {
      out_.note(name, "not converted: parameters stay on the GPU (zfcore keeps parameters in host memory, never on "
                      "disk: offload_optimizer.device = \"cpu\" with offload_param.device = \"cpu\" is cpu_full)");
      return;
    }
    out_.set("offload", "plugin", "\"cpu_full\"");
    if (offload.empty())
      out_.note(name, "offload.plugin = \"cpu_full\" keeps the master and optimizer state in host memory too");
    if (value.contains("pin_memory")) out_.set("offload", "pin_memory", boolean(value["pin_memory"], name + ".pin_memory"));
    for (const char *key : {"buffer_count", "buffer_size", "max_in_cpu", "nvme_path"})
      if (value.contains(key))
        out_.note(name + "." + key, "ignored: cpu_full copies blocks ahead up to offload.prefetch_size elements");
  }

  void zenflow(const json &value, const std::string &offload) {
    const std::string name = "zero_optimization.zenflow";
    expect_object(value, name);
    ZF_REQUIRE(!offload.empty(), "%s: %s needs zero_optimization.offload_optimizer.device = \"cpu\" or \"nvme\"",
               source_.c_str(), name.c_str());
    out_.tables["zenflow"];  // the table turns ZenFlow on, even empty
    // DeepSpeed's semantics: the whole interval's CPU update at its end, used one interval later.
    out_.set("zenflow", "schedule", toml_string("deepspeed"));
    for (auto &[key, v] : value.items()) {
      const std::string full = name + "." + shown(key);
      if (key == "topk_ratio" || key == "auto_ratio" || key == "pt_reserved_cores_perc")
        out_.set("zenflow", key, number(v, full));
      else if (key == "update_interval" || key == "select_interval")
        out_.set("zenflow", key, v.is_string() ? toml_string(v.get<std::string>()) : number(v, full));
      else if (key == "select_strategy") out_.set("zenflow", key, toml_string(text(value, name, "select_strategy", "")));
      else if (key == "overlap_step") out_.set("zenflow", key, boolean(v, full));
      else if (key == "full_warm_up_rounds") out_.set("zenflow", key, number(v, full));
      else if (key == "offload") out_.set("zenflow", "offload_selected_state", boolean(v, full));
      else if (key == "steps_per_epoch") out_.note(full, "ignored: zfcore knows the epoch from the data");
      else throw Error(format("%s: \"%s\" is not a ZenFlow key zfcore knows", source_.c_str(), full.c_str()));
    }
  }

  void optimizer(const json *opt) {
    const bool offloaded = out_.tables.count("offload") != 0;
    if (!opt) {
      if (offloaded) out_.set("optimizer", "plugin", "\"cpu_adam\"");
      return;
    }
    sub_keys(*opt, "optimizer", {"type", "params"});
    const std::string type = text(*opt, "optimizer", "type", "AdamW");
    std::string plugin;
    if (type == "Adam" || type == "AdamW" || type == "adam" || type == "adamw" || type == "FusedAdam" ||
        type == "CPUAdam" || type == "DeepSpeedCPUAdam")
      plugin = offloaded ? "cpu_adam" : "gpu_adam";
    else if (type == "Lion" || type == "lion") plugin = "cpu_lion";
    else if (type == "Adagrad" || type == "adagrad") plugin = "cpu_adagrad";
    else throw Error(format("%s: optimizer.type = \"%s\": zfcore has Adam/AdamW, Lion and Adagrad", source_.c_str(),
                            shown(type).c_str()));
    ZF_REQUIRE(offloaded || plugin == "gpu_adam",
               "%s: optimizer.type = \"%s\" runs on the CPU in zfcore: add zero_optimization.offload_optimizer "
               "(device \"cpu\")", source_.c_str(), shown(type).c_str());
    out_.set("optimizer", "plugin", "\"" + plugin + "\"");
    if (!opt->contains("params")) return;
    const json &params = (*opt)["params"];
    expect_object(params, "optimizer.params");
    for (auto &[key, v] : params.items()) {
      const std::string full = "optimizer.params." + shown(key);
      if (key == "lr" && !warmup_max_lr_.empty()) continue;  // the scheduler's peak wins
      if (key == "lr" || key == "eps" || key == "weight_decay") out_.set("optimizer", key, number(v, full));
      else if (key == "betas") {
        ZF_REQUIRE(v.is_array() && v.size() == 2 && v[0].is_number() && v[1].is_number(),
                   "%s: %s must be [beta1, beta2]", source_.c_str(), full.c_str());
        out_.set("optimizer", "beta1", number(v[0], full));
        out_.set("optimizer", "beta2", number(v[1], full));
      } else if (key == "adam_w_mode" && plugin == "cpu_adam") out_.set("optimizer", key, boolean(v, full));
      else out_.note(full, "ignored: no such parameter of " + plugin);
    }
    if (!warmup_max_lr_.empty()) out_.set("optimizer", "lr", warmup_max_lr_);
  }

  void scheduler(const json &value) {
    sub_keys(value, "scheduler", {"type", "params"});
    const std::string type = text(value, "scheduler", "type", "");
    const json params = value.value("params", json::object());
    expect_object(params, "scheduler.params");
    std::string schedule;
    if (type == "WarmupLR") schedule = "constant";
    else if (type == "WarmupDecayLR") schedule = "linear";
    else if (type == "WarmupCosineLR") schedule = "cosine";
    else throw Error(format("%s: scheduler.type = \"%s\": zfcore has WarmupLR, WarmupDecayLR and WarmupCosineLR",
                            source_.c_str(), shown(type).c_str()));
    out_.set("train", "lr_schedule", "\"" + schedule + "\"");
    for (auto &[key, v] : params.items()) {
      const std::string full = "scheduler.params." + shown(key);
      if (key == "warmup_num_steps") out_.set("train", "warmup_steps", number(v, full));
      else if (key == "total_num_steps") out_.set("train", "steps", number(v, full));
      else if (key == "warmup_max_lr") warmup_max_lr_ = number(v, full);
      else if (key == "cos_min_ratio") out_.set("train", "min_lr_ratio", number(v, full));
      else if (key == "warmup_min_lr" || key == "warmup_min_ratio") {
        ZF_REQUIRE(v.is_number(), "%s: %s must be a number", source_.c_str(), full.c_str());
        if (v.get<double>() != 0) out_.note(full, "ignored: zfcore warms up from 0");
      } else if (key == "warmup_type") {
        if (v != "linear") out_.note(full, "ignored: zfcore warms up linearly");
      } else if (key == "last_batch_iteration") {
        out_.note(full, "ignored: a resumed run continues the schedule from its checkpoint");
      } else {
        throw Error(format("%s: \"%s\" is not a %s parameter zfcore knows", source_.c_str(), full.c_str(),
                           type.c_str()));
      }
    }
    if (schedule == "linear") out_.set("train", "min_lr_ratio", "0.0");  // WarmupDecayLR decays to 0
  }

  // ---- values ----
  const json *find(const json &object, const char *key) const {
    return object.is_object() && object.contains(key) ? &object[key] : nullptr;
  }
  void expect_object(const json &value, const std::string &name) const {
    ZF_REQUIRE(value.is_object(), "%s: %s must be an object", source_.c_str(), name.empty() ? "the config" : name.c_str());
  }
  void sub_keys(const json &value, const std::string &name, std::set<std::string> allowed) const {
    expect_object(value, name);
    for (auto &[key, v] : value.items())
      ZF_REQUIRE(allowed.count(key), "%s: \"%s.%s\" is not a DeepSpeed key zfcore knows", source_.c_str(),
                 name.c_str(), shown(key).c_str());
  }
  std::string number(const json &value, const std::string &name) const {
    ZF_REQUIRE(value.is_number(), "%s: %s = %s must be a number", source_.c_str(), name.c_str(),
               shown(value.dump()).c_str());
    ZF_REQUIRE((!value.is_number_unsigned() || value.get<uint64_t>() <= uint64_t(INT64_MAX)) &&
                   (!value.is_number_float() || std::isfinite(value.get<double>())),
               "%s: %s = %s is out of range", source_.c_str(), name.c_str(), shown(value.dump()).c_str());
    return value.dump();  // the shortest text that reads back the same number; valid TOML
  }
  // A string member of `object` (`fallback` when it has none).
  std::string text(const json &object, const std::string &name, const char *key, const char *fallback) const {
    if (!object.contains(key)) return fallback;
    ZF_REQUIRE(object[key].is_string(), "%s: %s.%s must be a string", source_.c_str(), name.c_str(), key);
    return object[key].get<std::string>();
  }
  std::string boolean(const json &value, const std::string &name) const {
    ZF_REQUIRE(value.is_boolean(), "%s: %s must be true or false", source_.c_str(), name.c_str());
    return value.get<bool>() ? "true" : "false";
  }
  int64_t integer(const json &object, const std::string &name, const char *key, int64_t fallback) const {
    if (!object.contains(key)) return fallback;
    ZF_REQUIRE(object[key].is_number_integer(), "%s: %s.%s must be an integer", source_.c_str(), name.c_str(), key);
    return object[key].get<int64_t>();
  }
  static bool enabled_value(const json &value) { return value.is_object() && value.value("enabled", json(false)) == true; }

  std::string source_;
  Toml out_;
  int stage_ = 0;
  std::string aio_queue_depth_, warmup_max_lr_;
};

}  // namespace

std::string deepspeed_to_toml(const std::string &json_text, const std::string &source) {
  return Converter(source).convert(parse_json(json_text, source)).text(source);
}

}  // namespace zf
