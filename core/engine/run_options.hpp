// run_options.hpp: the core tables of a config ([run], [train], [checkpoint], [sample], the
// optimizer's hyperparameters) read once into typed structs; the step loop reads no key by name.
// The checkpoint store reads its own keys (training_checkpoint.hpp); models and data read theirs.
#pragma once

#include "config/config.hpp"
#include "engine/generate.hpp"
#include "engine/schedule.hpp"
#include "update/update_plan.hpp"

#include <string>

namespace zf {

struct RunOptions {
  // [run]
  uint64_t seed = 0;
  std::string output_dir;  // run.output_dir, default runs/NAME
  std::string progress;    // auto | on | off
  int64_t log_every = 1, timing_warmup = 0;
  bool wall_clock_breakdown = false;  // a line of timers under each step line
  bool rank_timers = false;           // every rank's timers in steps.jsonl
  bool tensorboard = true;            // event files in OUTPUT_DIR/tensorboard/
  double host_memory_limit_gb = 0;
  double comm_timeout_s = 0;  // 0: automatic (Trainer::set_comm_timeout)
  // [train]
  int64_t steps = 1, micro_batch = 1, grad_accum = 1, eval_every = 0, eval_batches = 0;
  double clip_grad_norm = 0;
  LrSchedule schedule;
  // [checkpoint]
  int64_t checkpoint_every = 0;
  bool checkpoint_final = true;  // a checkpoint after the last step
  std::string export_hf;
  // [sample]: tokens > 0 samples from the model at the end
  SampleOptions sample;
  // [model]
  bool column_major = false;
  bool interleave_blocks = false;  // model.block_order = "interleaved"
  // [optimizer]
  OptimizerSettings optimizer;

  static RunOptions read(const RunConfig &config);
};

// Where the run writes (run.output_dir, checkpoint.dir, checkpoint.export_hf), checked before step 1
// on the rank that writes: a run must not train for hours and then find that it cannot write its
// reports, its checkpoints or its export.
void check_output_paths(const RunConfig &config, const RunOptions &options, bool export_only = false);

}  // namespace zf
