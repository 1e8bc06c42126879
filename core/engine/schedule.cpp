#include "engine/schedule.hpp"

#include <algorithm>
#include <cmath>

namespace zf {

double LrSchedule::factor(int64_t step) const {
  // Both reach 1 at step warmup_steps; log rises fast at first, as DeepSpeed's
  // log(iteration + 1) / log(warmup_num_steps) does, shifted one step so that the first step trains.
  if (warmup_steps > 0 && step <= warmup_steps)
    return warmup_type == "log" ? std::log(double(step + 1)) / std::log(double(warmup_steps + 1))
                                : double(step) / double(warmup_steps);
  if (kind == "constant") return 1.0;
  int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps);
  double progress = std::clamp(double(step - warmup_steps) / double(decay_steps), 0.0, 1.0);
  double shape = kind == "cosine" ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return min_lr_ratio + (1.0 - min_lr_ratio) * shape;
}

}  // namespace zf
