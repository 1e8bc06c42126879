// schedule.hpp: the learning-rate schedule, a pure function of the step (so resuming needs only
// the step): a linear or logarithmic warm-up from warmup_min_ratio * lr, then constant, cosine or
// linear decay to min_lr_ratio * lr. `steps` = "deepspeed" counts the steps as DeepSpeed's
// schedulers do, so that a converted DeepSpeed config gets DeepSpeed's learning-rate curve.
#pragma once

#include <cstdint>
#include <string>

namespace zf {

struct LrSchedule {
  std::string kind = "constant";  // constant | cosine | linear
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  double min_lr_ratio = 0.0;
  std::string warmup_type = "linear";  // linear | log
  double warmup_min_ratio = 0.0;       // where the warm-up starts, a fraction of the lr
  std::string steps = "zfcore";        // zfcore | deepspeed (see factor_deepspeed)

  // Multiplier of the base learning rate for 1-based step `step`.
  double factor(int64_t step) const;

 private:
  double factor_zfcore(int64_t step) const;
  // [Note: DeepSpeed's steps] DeepSpeed's engine steps its scheduler after each optimizer step, and
  // the scheduler sets the lr of the step after: step 1 runs at the lr set when the scheduler was
  // made (the warm-up's start; WarmupCosineLR's 0), step s at DeepSpeed's iteration i = s - 2. Its
  // warm-up lasts W = max(2, warmup_steps) iterations, so 0, 1 and 2 warm up alike (DeepSpeed 0.19.3
  // and later refuse 0; earlier ones take it as 2): log(i + 1) / log(W) or i / W; then
  // WarmupLR stays at the peak, WarmupDecayLR falls linearly, (total - i) / (total - W), and
  // WarmupCosineLR follows a cosine over (i - W + 1) / (total - W), floored at min_lr_ratio.
  double factor_deepspeed(int64_t step) const;
};

}  // namespace zf
