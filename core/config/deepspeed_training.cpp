// The optimizer and scheduler of a DeepSpeed config, with DeepSpeed's scheduler semantics
// (train.lr_schedule_steps = "deepspeed"; the formulas in engine/schedule.hpp) and, for a Hugging
// Face Trainer config, the Trainer's defaults.
#include "config/deepspeed_converter.hpp"

#include "runtime/error.hpp"

namespace zf::deepspeed {

namespace {

// AdamW: on the GPU where gpu_adam is built and the run computes there, else on the CPU.
const char *const kAdamEverywhere = "[\"gpu_adam\", \"cpu_adam\"]";
const char *const kAdamOnHost = "\"cpu_adam\"";

}  // namespace

void Converter::optimizer(const json *opt) {
  const bool offloaded = out_.tables.count("offload") != 0;
  if (!opt) {  // DeepSpeed then steps the optimizer the training script hands it
    out_.set("optimizer", "plugin", offloaded ? kAdamOnHost : kAdamEverywhere);
    if (trainer_) {
      out_.set("optimizer", "lr", "5e-05");
      out_.note("optimizer", "not in the config, which the Hugging Face Trainer fills (\"auto\"): the Trainer's AdamW "
                             "with its defaults: lr 5e-05, betas (0.9, 0.999), eps 1e-08, weight_decay 0");
    } else {
      out_.note("optimizer", "not in the config (DeepSpeed would use the training script's): AdamW with [optimizer]'s "
                             "defaults: lr 0.001, betas (0.9, 0.999), eps 1e-08, weight_decay 0; set them there");
    }
    schedule_range();
    return;
  }
  expect_object(*opt, "optimizer");
  known_keys(*opt, "optimizer", {"type", "params"}, "an optimizer key");
  const std::string type = text(*opt, "optimizer", "type", "AdamW");
  std::string plugin;
  const bool adam = type == "Adam" || type == "AdamW" || type == "adam" || type == "adamw" || type == "FusedAdam" ||
                    type == "CPUAdam" || type == "DeepSpeedCPUAdam";
  if (adam) plugin = offloaded ? kAdamOnHost : kAdamEverywhere;
  else if (type == "Lion" || type == "lion") plugin = "\"cpu_lion\"";
  else if (type == "Adagrad" || type == "adagrad") plugin = "\"cpu_adagrad\"";
  else fail("optimizer.type", format("optimizer.type = \"%s\": zfcore has Adam/AdamW, Lion and Adagrad", shown(type).c_str()));
  if (!offloaded && !adam)
    fail("optimizer.type", format("optimizer.type = \"%s\" runs on the CPU in zfcore: add "
                                  "zero_optimization.offload_optimizer (device \"cpu\")", shown(type).c_str()));
  out_.set("optimizer", "plugin", plugin);
  const json params = opt->value("params", json::object());
  expect_object(params, "optimizer.params");
  known_keys(params, "optimizer.params", kOptimizerParams, "an optimizer parameter");
  for (auto &[key, raw] : params.items()) {
    const std::string full = "optimizer.params." + key;
    const json &v = resolve(raw, full);
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
    } else if (key == "adam_w_mode" && plugin == kAdamOnHost) {
      out_.set("optimizer", key, boolean(v, full));
    } else if (key == "adam_w_mode" && plugin == kAdamEverywhere) {
      if (boolean(v, full) == "true") {
        out_.note(full, "true: AdamW's decoupled weight decay, which gpu_adam and cpu_adam compute");
      } else {  // Adam with L2 decay: cpu_adam's alone
        out_.set("optimizer", "plugin", kAdamOnHost);
        out_.set("optimizer", key, "false");
        out_.note(full, "false: Adam with L2 weight decay, which only cpu_adam computes: optimizer.plugin = \"cpu_adam\"");
      }
    } else {
      out_.note(full, "ignored: no such parameter of " + plugin);
    }
  }
  schedule_range();
}

// The peak is warmup_max_lr where the scheduler has one (it replaces the optimizer's lr, as in
// DeepSpeed), else the optimizer's lr. WarmupLR and WarmupDecayLR start their warm-up at
// warmup_min_lr, and WarmupDecayLR decays back to it: fractions of the peak here.
void Converter::schedule_range() {
  if (!warmup_max_lr_.empty()) out_.set("optimizer", "lr", warmup_max_lr_);
  if (warmup_min_lr_.empty() || schedule_type_ == "WarmupCosineLR") return;
  const double low = std::stod(warmup_min_lr_);
  if (low == 0) return;
  const std::string path = "scheduler.params.warmup_min_lr";
  double peak = 1e-3;  // zfcore's optimizer.lr, unless set
  for (const auto &[key, value] : out_.tables["optimizer"])
    if (key == "lr") peak = std::stod(value);
  if (low < 0 || low > peak)
    fail(path, format("%s = %s: the warm-up must rise from it to the peak lr %g (warmup_max_lr, or the optimizer's "
                      "lr): zfcore has no warm-down; set it between 0 and %g", path.c_str(), warmup_min_lr_.c_str(),
                      peak, peak));
  const std::string ratio = json(low / peak).dump();
  out_.set("train", "warmup_min_ratio", ratio);
  if (schedule_type_ == "WarmupDecayLR") out_.set("train", "min_lr_ratio", ratio);
}

// DeepSpeed's three warm-up schedulers, with DeepSpeed's defaults where a parameter is missing:
// 1000 warm-up steps, a logarithmic warm-up, WarmupDecayLR's peak 0.001 (it replaces the
// optimizer's lr; WarmupLR's peak is the optimizer's lr), WarmupCosineLR's floor cos_min_ratio 1e-4.
void Converter::scheduler(const json &value) {
  expect_object(value, "scheduler");
  known_keys(value, "scheduler", {"type", "params"}, "a scheduler key");
  const std::string type = text(value, "scheduler", "type", "");
  auto known = kSchedulers.find(type);
  if (known == kSchedulers.end())
    fail("scheduler.type", format("scheduler.type = \"%s\": zfcore has WarmupLR, WarmupDecayLR and WarmupCosineLR",
                                  shown(type).c_str()));
  schedule_type_ = type;
  const json params = value.value("params", json::object());
  expect_object(params, "scheduler.params");
  known_keys(params, "scheduler.params", known->second, "a " + type + " parameter");
  const std::string schedule = type == "WarmupLR" ? "constant" : type == "WarmupDecayLR" ? "linear" : "cosine";
  out_.set("train", "lr_schedule", "\"" + schedule + "\"");
  out_.set("train", "lr_schedule_steps", "\"deepspeed\"");
  out_.set("train", "warmup_steps", "1000");
  out_.set("train", "warmup_type", "\"log\"");
  if (schedule == "linear") out_.set("train", "min_lr_ratio", "0.0");  // to warmup_min_lr, 0 unless set
  if (schedule == "cosine") out_.set("train", "min_lr_ratio", "0.0001");
  if (schedule == "linear") warmup_max_lr_ = "0.001";
  if (schedule != "constant" && !params.contains("total_num_steps"))
    fail("scheduler.type", type + " needs scheduler.params.total_num_steps (the length of its decay)");
  for (auto &[key, raw] : params.items()) {
    const std::string full = "scheduler.params." + key;
    const json &v = resolve(raw, full);
    if (key == "warmup_num_steps") {
      const std::string steps = integer(v, full);
      out_.set("train", "warmup_steps", steps);
      if (steps == "0" && raw != "auto")
        out_.note(full, "0: warms up as 1 and 2 do, over DeepSpeed's max(2, warmup_num_steps) steps (DeepSpeed "
                        "before 0.19.3 takes 0 so; later versions refuse it: warmup_num_steps must be positive)");
    } else if (key == "total_num_steps") {  // the decay's length, and the run's unless train.steps is set
      const std::string total = integer(v, full);
      out_.set("train", "steps", total);
      out_.set("train", "lr_decay_steps", total);
    } else if (key == "warmup_max_lr") {
      warmup_max_lr_ = real(v, full);
    } else if (key == "warmup_min_lr") {
      warmup_min_lr_ = real(v, full);
    } else if (key == "warmup_min_ratio") {
      out_.set("train", "warmup_min_ratio", real(v, full));
    } else if (key == "cos_min_ratio") {
      out_.set("train", "min_lr_ratio", real(v, full));
    } else if (key == "warmup_type") {
      const std::string warmup = text(params, "scheduler.params", "warmup_type", "");
      if (warmup != "log" && warmup != "linear")
        fail(full, format("%s = \"%s\": DeepSpeed's warm-up types are log and linear", full.c_str(), shown(warmup).c_str()));
      out_.set("train", "warmup_type", toml_string(warmup));
    } else {
      out_.note(full, "ignored: a resumed run continues the schedule from its checkpoint");  // last_batch_iteration
    }
  }
}

// The Hugging Face Trainer makes its own scheduler when the DeepSpeed config has none: its
// default lr_scheduler_type "linear", from the lr to 0 over the run, without warm-up.
void Converter::trainer_schedule() {
  out_.set("train", "lr_schedule", "\"linear\"");
  out_.set("train", "min_lr_ratio", "0.0");
  out_.note("scheduler", "not in the config, which the Hugging Face Trainer fills (\"auto\"): the Trainer's default "
                         "schedule, linear decay from optimizer.lr to 0 over train.steps without warm-up (lr_schedule = "
                         "\"linear\", min_lr_ratio = 0; step s runs at (steps - s) / steps of the lr, one step ahead "
                         "of the Trainer's (steps - s + 1) / steps)");
}

}  // namespace zf::deepspeed
