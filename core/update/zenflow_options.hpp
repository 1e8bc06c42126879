// zenflow_options.hpp: the [zenflow] table, read and checked (docs/zenflow.md has every key).
#pragma once

#include "config/config.hpp"

#include <cstdint>

namespace zf {

struct ZenFlowOptions {
  bool enabled = false;  // the config has a [zenflow] table
  double topk_ratio = 0.1;   // 0 = "auto": chosen at the first selection (ZenFlow::choose_topk)
  int64_t update_interval = 4;  // 0 = "auto"
  int64_t select_interval = 1;  // steps between selections
  bool overlap = true;
  bool staggered = true;   // schedule = "staggered"; false: "deepspeed"
  bool from_scratch = true;  // model.init_from is not set
  double cpu_lr_scale = 1;  // the CPU update's lr over optimizer.lr
  // correction: what the staggered schedule does about the other columns' delay (docs/zenflow.md);
  // "auto" (the default): age_gate under the staggered schedule, none under the deepspeed one.
  // lookahead: the forward reads each CPU update extrapolated by correction_factor x its step;
  // age_gate: a gradient computed before its column's last CPU update was swapped in enters the
  // column's next window weighted by correction_factor.
  enum class Correction { none, lookahead, age_gate } correction = Correction::none;
  double correction_factor = 0;
  int64_t warm_up = 0;
  double auto_ratio = 0.99;
  // steps_per_epoch: optimizer steps in one pass over the training data (select_interval "auto",
  // select_strategy "epoch").
  static ZenFlowOptions read(const RunConfig &config, int64_t steps_per_epoch);
};

// topk_ratio = "auto" chooses at least this fraction.
constexpr double kMinAutoTopk = 0.01;

// With update_interval = "auto", a CPU update is due at the latest after this many steps.
constexpr int64_t kMaxAutoInterval = 32;

}  // namespace zf
