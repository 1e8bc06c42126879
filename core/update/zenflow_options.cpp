#include "update/zenflow_options.hpp"

#include "config/limits.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace zf {

namespace {

// "auto" -> 0, else an integer >= 1.
int64_t interval(const RunConfig &config, const char *key) {
  std::string text = config.string("zenflow", key);
  if (text == "auto") return 0;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && value >= 1 && value <= kMaxSteps,
             "%s: zenflow.%s = \"%s\": expected an integer >= 1 or \"auto\"",
             config.where("zenflow", key).str().c_str(), key, text.c_str());
  return value;
}

// "auto" -> 0, else a number in (0, most]; `range` says which in the error.
double positive_or_auto(const RunConfig &config, const char *key, double most, const char *range) {
  std::string text = config.string("zenflow", key);
  if (text == "auto") return 0;
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(value) && value > 0 && value <= most,
             "%s: zenflow.%s = \"%s\": expected %s or \"auto\"", config.where("zenflow", key).str().c_str(), key,
             text.c_str(), range);
  return value;
}

// cpu_lr_scale "auto": the CPU update moves a column as far as the update_interval steps it stands
// for when fine-tuning (measured: closer to AdamW), and one step's worth from scratch (where the
// larger step trains worse).
double auto_cpu_lr_scale(const ZenFlowOptions &o) {
  return o.staggered && o.update_interval > 0 && !o.from_scratch ? double(o.update_interval) : 1.0;
}

// zenflow.correction and its factor ("auto": lookahead 1, one whole step ahead; age_gate 0, the
// stale gradient dropped). correction "auto" is age_gate under the staggered schedule (measured on
// three text pairs, fine-tuning and from scratch: docs/zenflow.md) and none under the deepspeed one,
// whose interval-long delay neither correction was made for; a correction named there is refused.
void read_correction(const RunConfig &config, ZenFlowOptions &o) {
  using Correction = ZenFlowOptions::Correction;
  const std::string name = config.string("zenflow", "correction");
  const bool age_gate = name == "age_gate" || (name == "auto" && o.staggered);
  o.correction = name == "lookahead" ? Correction::lookahead : age_gate ? Correction::age_gate : Correction::none;
  ZF_REQUIRE(o.correction == Correction::none || o.staggered,
             "%s: zenflow.correction = \"%s\" corrects the staggered schedule's one step of delay; it needs "
             "zenflow.schedule = \"staggered\" (without the key the deepspeed schedule runs uncorrected)",
             config.where("zenflow", "correction").str().c_str(), name.c_str());
  const std::string text = config.string("zenflow", "correction_factor");
  if (text == "auto") {
    o.correction_factor = o.correction == Correction::lookahead ? 1.0 : 0.0;
    return;
  }
  char *end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  const bool lookahead = o.correction == Correction::lookahead;
  const double most = lookahead ? 4.0 : 1.0;
  ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(value) && value >= 0 && value <= most,
             "%s: zenflow.correction_factor = \"%s\": expected %s or \"auto\"",
             config.where("zenflow", "correction_factor").str().c_str(), text.c_str(),
             lookahead ? "the share of the last CPU step to look ahead, in [0, 4]"
                       : "the stale gradient's weight, in [0, 1]");
  o.correction_factor = value;
}

}  // namespace

ZenFlowOptions ZenFlowOptions::read(const RunConfig &config, int64_t steps_per_epoch) {
  ZenFlowOptions o;
  o.enabled = config.has_table("zenflow");
  if (!o.enabled) return o;
  o.topk_ratio = positive_or_auto(config, "topk_ratio", 1, "a fraction in (0, 1]");
  o.update_interval = interval(config, "update_interval");
  o.overlap = config.boolean("zenflow", "overlap_step");
  o.staggered = config.string("zenflow", "schedule") == "staggered";
  ZF_REQUIRE(!o.staggered || o.update_interval != 0,
             "%s: zenflow.update_interval = \"auto\" ends an interval when the other columns' gradients outweigh the "
             "selected ones (zen-auto), which needs zenflow.schedule = \"deepspeed\"; the staggered schedule "
             "takes an integer", config.where("zenflow", "update_interval").str().c_str());
  o.from_scratch = config.string("model", "init_from").empty();
  o.cpu_lr_scale = positive_or_auto(config, "cpu_lr_scale", 1e6, "a number > 0");
  if (o.cpu_lr_scale == 0) o.cpu_lr_scale = auto_cpu_lr_scale(o);
  read_correction(config, o);
  o.warm_up = config.integer("zenflow", "full_warm_up_rounds");
  o.auto_ratio = config.real("zenflow", "auto_ratio");
  const int64_t select = interval(config, "select_interval"), epoch = std::max<int64_t>(1, steps_per_epoch);
  const std::string strategy = config.string("zenflow", "select_strategy");
  ZF_REQUIRE(strategy != "auto" || select == 0,
             "%s: zenflow.select_interval = %lld needs select_strategy = \"step\" or \"epoch\" (\"auto\" chooses the "
             "columns again every epoch)", config.where("zenflow", "select_interval").str().c_str(), (long long)select);
  ZF_REQUIRE(o.staggered || strategy != "step" || select == 0 || o.update_interval == 0 || select >= o.update_interval,
             "%s: zenflow.select_interval = %lld steps is shorter than update_interval = %lld: columns are chosen "
             "again only at the start of an interval; use select_interval >= update_interval",
             config.where("zenflow", "select_interval").str().c_str(), (long long)select,
             (long long)o.update_interval);
  o.select_interval = strategy == "step" && select ? select : (select ? select : 1) * epoch;
  ZF_REQUIRE(!config.boolean("zenflow", "offload_selected_state"),
             "%s: zenflow.offload_selected_state = true is not supported yet: the selected columns' master and "
             "moments stay on the GPU (about topk_ratio x 12 bytes per parameter); remove the key",
             config.where("zenflow", "offload_selected_state").str().c_str());
  ZF_REQUIRE(config.boolean("model", "column_major"),
             "%s: model.column_major = false, but ZenFlow updates whole gradient columns, which must be contiguous: "
             "remove model.column_major", config.where("model", "column_major").str().c_str());
  return o;
}

}  // namespace zf
