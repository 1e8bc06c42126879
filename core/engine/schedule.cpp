#include "engine/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

double LrSchedule::factor(int64_t step) const { return steps == "deepspeed" ? factor_deepspeed(step) : factor_zfcore(step); }

double LrSchedule::factor_zfcore(int64_t step) const {
  // Both reach 1 at step warmup_steps; log rises fast at first (DeepSpeed's shape, shifted so that
  // the first step trains: log(step + 1) / log(warmup_steps + 1)).
  if (warmup_steps > 0 && step <= warmup_steps) {
    double rise = warmup_type == "log" ? std::log(double(step + 1)) / std::log(double(warmup_steps + 1))
                                       : double(step) / double(warmup_steps);
    return warmup_min_ratio + (1.0 - warmup_min_ratio) * rise;
  }
  if (kind == "constant") return 1.0;
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::clamp(double(step - warmup_steps) / double(decay_steps), 0.0, 1.0);
  double shape = kind == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return min_lr_ratio + (1.0 - min_lr_ratio) * shape;
}

// [Note: DeepSpeed's steps] in schedule.hpp.
double LrSchedule::factor_deepspeed(int64_t step) const {
  const int64_t i = step - 2;
  const int64_t warmup = std::max<int64_t>(2, warmup_steps);  // 0, 1 and 2 alike, as in DeepSpeed
  if (i < warmup) {
    if (i < 0) return kind == "cosine" ? 0.0 : warmup_min_ratio;
    double rise = warmup_type == "log" ? std::log(double(i + 1)) / std::log(double(warmup))
                                       : double(i) / double(warmup);
    return warmup_min_ratio + (1.0 - warmup_min_ratio) * rise;
  }
  const double span = double(std::max<int64_t>(1, total_steps - warmup));
  if (kind == "constant") return 1.0;
  if (kind == "linear")
    return min_lr_ratio + (1.0 - min_lr_ratio) * std::max(0.0, double(total_steps - i) / span);
  const double progress = std::min(1.0, double(i - warmup + 1) / span);
  return std::max(0.0, min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + std::cos(M_PI * progress)));
}

}  // namespace zf
