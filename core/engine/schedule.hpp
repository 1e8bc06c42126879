// schedule.hpp: the learning-rate schedule, a pure function of the step (so resuming needs only
// the step): a linear or logarithmic warm-up from 0, then constant, cosine or linear decay to
// min_lr_ratio * lr.
#pragma once

#include <cstdint>
#include <string>

namespace zf {

struct LrSchedule {
  std::string kind = "constant";  // constant | cosine | linear
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;
  std::string warmup_type = "linear";  // linear | log (DeepSpeed's default)

  // Multiplier of the base learning rate for 1-based step `step`.
  double factor(int64_t step) const;
};

}  // namespace zf
