// run_summary.hpp: what a training run returns (and summary.json reports).
#pragma once

#include <cstdint>
#include <string>

namespace zf {

struct RunSummary {
  int64_t first_step = 1;  // > 1 when the run resumed from a checkpoint
  int64_t steps = 0;       // the last step run
  int stop_signal = 0;     // SIGTERM/SIGINT that stopped the run early (after a checkpoint), or 0
  double initial_loss = 0;
  double final_loss = 0;
  double eval_loss = 0;    // the last evaluation's (train.eval_every > 0)
  double mean_step_ms = 0;
  std::string param_digest;
  std::string output_dir;
};

}  // namespace zf
