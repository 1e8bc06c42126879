// The engine's keys of a DeepSpeed config: ZeRO, offload, ZenFlow, precision, async I/O; the
// conversion's entry points (deepspeed.hpp) and its TOML output.
#include "config/deepspeed.hpp"

#include "config/config.hpp"
#include "config/deepspeed_converter.hpp"
#include "config/plugin_config.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

namespace zf {

namespace deepspeed {

std::string shown(const std::string &text) {
  std::string out = excerpt(text, 80);
  for (char &c : out)
    if ((unsigned char)c < 0x20 || c == 0x7f) c = '?';
  return out;
}

// JSON's escapes are TOML's, but TOML also escapes DEL.
std::string toml_string(const std::string &text) {
  std::string out;
  for (char c : json(text).dump()) out += c == 0x7f ? std::string("\\u007F") : std::string(1, c);
  return out;
}

std::string join(const std::string &path, const std::string &key) { return path.empty() ? key : path + "." + key; }

void Toml::set(const std::string &table, const std::string &key, const std::string &value) {
  if (value.empty()) return;
  auto &entries = tables[table];
  for (auto &entry : entries)
    if (entry.first == key) {
      entry.second = value;
      return;
    }
  entries.emplace_back(key, value);
}

bool Toml::unset(const std::string &table, const std::string &key) {
  auto &entries = tables[table];
  auto found = std::find_if(entries.begin(), entries.end(), [&](const auto &entry) { return entry.first == key; });
  if (found == entries.end()) return false;
  entries.erase(found);
  return true;
}

bool Toml::has(const std::string &table, const std::string &key) const {
  auto found = tables.find(table);
  return found != tables.end() && std::any_of(found->second.begin(), found->second.end(),
                                              [&](const auto &entry) { return entry.first == key; });
}

std::string Toml::text(const std::string &source) const {
  std::string out = "# Converted from " + shown(source) + " by zfcore convert.\n";
  if (!notes.empty()) {
    out += "# DeepSpeed keys without a zfcore key of their own, or whose value differs from DeepSpeed's:\n";
    for (const std::string &n : notes) out += "#   " + n + "\n";
  }
  out += "# A DeepSpeed config names no model and no data: name the model in the [model] table at the\n"
         "# end (preset, init_from or the shape) and add [data] (see examples/); until then zfcore run\n"
         "# and validate refuse this file, as they refuse the JSON.\n";
  // [model] last, and always there: its keys go in that table, so that a key or two appended at the
  // end of the file land in it (a second [model] table would be a TOML error).
  for (const char *table : {"run", "train", "optimizer", "stage", "offload", "zenflow", "model"}) {
    auto found = tables.find(table);
    if (found == tables.end() && std::string(table) != "model") continue;
    out += std::string("\n[") + table + "]\n";
    if (std::string(table) == "model")
      out += "# preset = \"gpt2\"    # or init_from = \"DIR\" (a Hugging Face model), or type and the shape\n";
    if (found == tables.end()) continue;
    for (const auto &[key, value] : found->second) out += key + " = " + value + "\n";
  }
  return out;
}

Toml Converter::convert(const json &config) {
  ZF_REQUIRE(config.is_object(), "%s: the config must be an object", source_.c_str());
  known_keys(config, "", kTopLevel, "a DeepSpeed config key");
  trainer_ = has_auto(config);
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
  if (const json *types = find(config, "data_types")) data_types(*types);
  if (const json *aio = find(config, "aio")) aio_ = aio;
  check_combinations(zero);
  if (zero) zero_optimization(*zero);
  aio_notes();
  optimizer(find(config, "optimizer"));
  if (trainer_ && !find(config, "scheduler")) trainer_schedule();
  return out_;
}

void Converter::top_level(const std::string &key, const json &value) {
  if (key == "train_micro_batch_size_per_gpu") out_.set("train", "micro_batch", integer(resolve(value, key), key));
  else if (key == "gradient_accumulation_steps") out_.set("train", "grad_accum", integer(resolve(value, key), key));
  else if (key == "train_batch_size") out_.set("train", "global_batch", integer(resolve(value, key), key));
  else if (key == "gradient_clipping") out_.set("train", "clip_grad_norm", real(resolve(value, key), key));
  else if (key == "steps_per_print") out_.set("run", "log_every", integer(value, key));
  else if (key == "wall_clock_breakdown") out_.set("run", "wall_clock_breakdown", boolean(value, key));
  else if (key == "scheduler") scheduler(value);
  else if (key == "bf16" || key == "bfloat16" || key == "fp16" || key == "zero_optimization" || key == "optimizer" ||
           key == "aio" || key == "data_types") {
    // below, once the whole config is known
  } else if (key == "activation_checkpointing") {
    out_.note(key, "ignored: set model.activation_checkpointing = true to recompute layers");
  } else if (key == "seed") {
    out_.note(key, "ignored: the seed is run.seed (1234 unless set)");
  } else if (key == "tensorboard" || key == "wandb" || key == "csv_monitor") {
    out_.note(key, "ignored: every run writes steps.jsonl, steps.csv, summary.json, report.html and TensorBoard event "
                   "files (OUTPUT_DIR/tensorboard; run.tensorboard = false turns them off)");
  } else if (key == "zero_allow_untested_optimizer" || key == "zero_force_ds_cpu_optimizer") {
    out_.note(key, "ignored: every optimizer plugin works with every stage");
  } else if (key == "amp") {
    out_.note(key, "ignored: model.dtype = \"bfloat16\" is zfcore's mixed precision");
  } else if (key == "checkpoint") {
    out_.note(key, "ignored: checkpoints are [checkpoint] (every, keep, resume)");
  } else {
    out_.note(key, "ignored: no zfcore equivalent");
  }
}

// bf16 (or its old name bfloat16) and fp16: model.dtype. Both off is fp32, DeepSpeed's default.
void Converter::precision(const json &config) {
  bool bf16 = false, fp16 = false, any = false;
  for (const char *key : {"bf16", "bfloat16", "fp16"}) {
    const json *block = find(config, key);
    if (!block) continue;
    any = true;
    expect_object(*block, key);
    known_keys(*block, key, std::string(key) == "fp16" ? kFp16 : kBf16, std::string("a ") + key + " key");
    const std::string enabled = join(key, "enabled");
    bool on = block->contains("enabled") && boolean(resolve((*block)["enabled"], enabled), enabled) == "true";
    (std::string(key) == "fp16" ? fp16 : bf16) |= on;
    for (auto &[sub, v] : block->items())
      if (sub != "enabled")
        out_.note(join(key, sub), on ? "ignored: bf16 needs no loss scaling or overflow checks"
                                     : std::string("ignored: ") + key + " is off");
  }
  if (bf16 && fp16) fail("fp16", "bf16 and fp16 are both enabled: DeepSpeed takes one of them");
  if (fp16) out_.note("fp16", "zfcore computes in bf16 (model.dtype = \"bfloat16\", no loss scaling) instead of fp16");
  bf16_ = bf16 || fp16;
  if (any) out_.set("model", "dtype", bf16_ ? "\"bfloat16\"" : "\"float32\"");
}

// data_types.grad_accum_dtype: fp32 is train.grad_accum_dtype = "float32" (the micro-steps' bf16
// gradients add up in fp32); bf16 and fp16 accumulate in the compute dtype, as zfcore does by default.
void Converter::data_types(const json &value) {
  expect_object(value, "data_types");
  known_keys(value, "data_types", {"grad_accum_dtype"}, "a data_types key");
  if (!value.contains("grad_accum_dtype")) return;
  const std::string name = "data_types.grad_accum_dtype";
  const std::string dtype = text(value, "data_types", "grad_accum_dtype", "");
  if (dtype != "fp32" && dtype != "bf16" && dtype != "fp16")
    fail(name, format("%s = \"%s\": DeepSpeed's accumulation dtypes are fp32, bf16 and fp16", name.c_str(),
                      shown(dtype).c_str()));
  if (dtype == "fp32" && bf16_) {
    out_.set("train", "grad_accum_dtype", "\"float32\"");
    out_.note(name, "\"fp32\": train.grad_accum_dtype = \"float32\", the bf16 gradients of the micro-steps add up in "
                    "fp32, are reduced across ranks in fp32 and reach the optimizer in fp32 (every stage and offload)");
    return;
  }
  const char *compute = bf16_ ? "bfloat16" : "float32";
  const bool same = (dtype == "fp32") == !bf16_;
  out_.note(name, format("\"%s\": gradients accumulate in %s, the compute dtype%s", shown(dtype).c_str(), compute,
                         same ? ", as in DeepSpeed" : " (DeepSpeed would accumulate in the dtype named)"));
}

// What DeepSpeed refuses (and zfcore with it), and the offload choices ZenFlow excludes, each at
// the keys as written, with the fix that converts.
void Converter::check_combinations(const json *zero) {
  if (!zero) return;
  const std::string offload = "zero_optimization.offload_optimizer", param = "zero_optimization.offload_param",
                    zen = "zero_optimization.zenflow", stage = "zero_optimization.stage";
  const json *optimizer = find(*zero, "offload_optimizer");
  const json *params = find(*zero, "offload_param");
  const bool zenflow = find(*zero, "zenflow") != nullptr;
  const bool param_on = params && params->is_object() && params->contains("device") && (*params)["device"].is_string() &&
                        (*params)["device"] != "none";
  const json *ratio = optimizer && optimizer->is_object() ? find(*optimizer, "ratio") : nullptr;
  const bool partial = ratio && ratio->is_number() && ratio->get<double>() < 1;
  const std::string stage_at = zero->contains("stage") ? " (" + at(stage) + ")" : " (the default)";
  if (param_on && stage_ < 3)
    fail(param, format("%s needs zero_optimization.stage = 3: DeepSpeed offloads parameters under stage 3 only, and "
                       "the stage is %lld%s: %s", param.c_str(), (long long)stage_, stage_at.c_str(),
                       zenflow ? "remove offload_param (ZenFlow updates on the GPU, where the parameters must stay)"
                               : "remove offload_param, or set zero_optimization.stage to 3"));
  if (partial && stage_ < 3)
    fail(offload + ".ratio",
         format("%s.ratio = %s: DeepSpeed offloads part of the optimizer under stage 3 only (\"Partial offloading only "
                "supported for ZeRO Stage 3\"), and the stage is %lld%s: %s", offload.c_str(), ratio->dump().c_str(),
                (long long)stage_, stage_at.c_str(),
                zenflow ? "remove ratio (ZenFlow chooses what the GPU updates)"
                        : "remove ratio to update the whole optimizer state on the CPU, or set zero_optimization.stage "
                          "to 3"));
  if (partial && zenflow)
    fail(offload + ".ratio", format("%s.ratio = %s and %s (%s) both choose what the GPU updates: ZenFlow updates the "
                                    "selected columns there; remove ratio", offload.c_str(), ratio->dump().c_str(),
                                    zen.c_str(), at(zen).c_str()));
  if (param_on && zenflow)
    fail(param, format("%s keeps the parameters in host memory, but %s (%s) updates the selected columns on the GPU "
                       "every step: remove offload_param", param.c_str(), zen.c_str(), at(zen).c_str()));
}

void Converter::zero_optimization(const json &zero) {
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
std::string Converter::offload_optimizer(const json *offload) {
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

std::string Converter::device_of(const json &object, const std::string &name) {
  const std::string device = text(object, name, "device", "none");
  if (device != "none" && device != "cpu" && device != "nvme")
    fail(name + ".device", format("%s.device = \"%s\": expected none, cpu or nvme", name.c_str(), shown(device).c_str()));
  return device;
}

// Parameters in host memory: cpu_full, which keeps the master and optimizer state there too; beside
// NVMe optimizer state, the nvme plugin's offload_params (ZeRO-Infinity).
void Converter::offload_param(const json &value, const std::string &offload) {
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
      out_.note(name, "offload.plugin = \"cpu_full\" keeps the master and optimizer state in host memory too "
                      "(DeepSpeed would keep them on the GPU)");
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
void Converter::aio_notes() {
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

// DeepSpeed's ZenFlow, with DeepSpeed's defaults where zfcore's differ: topk_ratio 0.1,
// update_interval "auto", overlap_step false.
void Converter::zenflow(const json &value, const std::string &offload) {
  const std::string name = "zero_optimization.zenflow";
  expect_object(value, name);
  known_keys(value, name, kZenFlow, "a ZenFlow key");
  if (offload.empty())
    fail(name, name + " needs zero_optimization.offload_optimizer.device = \"cpu\" or \"nvme\"");
  out_.tables["zenflow"];  // the table turns ZenFlow on, even empty
  // DeepSpeed's semantics: the whole interval's CPU update at its end, used one interval later.
  out_.set("zenflow", "schedule", toml_string("deepspeed"));
  out_.set("zenflow", "topk_ratio", "0.1");
  out_.set("zenflow", "update_interval", toml_string("auto"));
  out_.set("zenflow", "overlap_step", "false");
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

}  // namespace deepspeed

// A DeepSpeed config names no model and no data; training linear_stack on random tokens instead
// would look like success. They must come from --set, or (`converted`: the TOML `zfcore convert`
// wrote) from the file's [model] and an added [data].
void require_model_and_data(const RunConfig &config, const std::string &path, bool converted) {
  const bool model = config.is_set("model", "type") || config.is_set("model", "preset") ||
                     config.is_set("model", "init_from");
  const bool data = config.is_set("data", "type") || config.is_set("data", "path");
  if (model && data) return;
  const std::string missing = !model && !data ? "no model and no data" : !model ? "no model" : "no data";
  const std::string add = format("%s%s%s", model ? "" : "--set model.preset=gpt2 (or model.init_from=DIR)",
                                 model || data ? "" : " and ", data ? "" : "--set data.type=text --set data.path=FILE");
  if (converted)
    throw Error(format("%s: converted from a DeepSpeed config by zfcore convert, it names %s (it would train a toy "
                       "model on random data): %s%s%s, or add %s on the command line",
                       path.c_str(), missing.c_str(),
                       model ? "" : "set preset = \"gpt2\" (or init_from = \"DIR\", or type and the shape) in its "
                                    "[model] table",
                       model || data ? "" : " and ", data ? "" : "add a [data] table (type = \"text\", path = FILE)",
                       add.c_str()));
  throw Error(format("%s: a DeepSpeed config names %s: add %s on the command line, or write it as TOML "
                     "(zfcore convert %s > train.toml) and add %s there",
                     path.c_str(), missing.c_str(), add.c_str(), path.c_str(),
                     !model && !data ? "[model] and [data]" : !model ? "[model]" : "[data]"));
}

// The TOML zfcore convert wrote: its first line says so (config/deepspeed.cpp).
bool converted_by_zfcore(const std::string &text) {
  const std::string first = text.substr(0, text.find('\n'));
  const std::string tail = " by zfcore convert.";
  return first.rfind("# Converted from ", 0) == 0 && first.size() > tail.size() &&
         first.compare(first.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_deepspeed_config_name(const std::string &path) {
  if (path.size() <= 5) return false;
  std::string end = path.substr(path.size() - 5);
  for (char &ch : end) ch = char(std::tolower(static_cast<unsigned char>(ch)));
  return end == ".json";
}

DeepSpeedConversion convert_deepspeed(const std::string &json_text, const std::string &source) {
  const nlohmann::json config = parse_json(json_text, source);
  deepspeed::Toml toml = deepspeed::Converter(source, json_key_positions(json_text)).convert(config);
  return DeepSpeedConversion{toml.text(source), toml.notes};
}

std::string deepspeed_to_toml(const std::string &json_text, const std::string &source) {
  return convert_deepspeed(json_text, source).toml;
}

}  // namespace zf
