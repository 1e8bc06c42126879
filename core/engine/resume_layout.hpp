// resume_layout.hpp: a checkpoint continued on another layout (number of ranks, stage, offload
// tier, ZenFlow), said rather than guessed. What the checkpoint's run recorded (checkpoint.json),
// the global batch (micro_batch x grad_accum x ranks: a change is refused unless
// checkpoint.resume_batch says how to continue), and ZenFlow's own state, which is exact only on
// the layout that wrote it: on another one ZenFlow's schedule starts afresh, and a checkpoint that
// still owes CPU updates is refused (their gradient sums are per rank and per group of its shard).
#pragma once

#include "config/config.hpp"
#include "engine/run_options.hpp"
#include "engine/training_checkpoint.hpp"

#include <filesystem>
#include <string>

namespace zf {

// What checkpoint.json records about the run that wrote it ("" or 0 where an older zfcore did not).
struct RecordedRun {
  int64_t world_size = 0, micro_batch = 0, grad_accum = 0;
  std::string config, stage, offload, optimizer, run_name, run_id, config_digest;  // config: the file it ran
  bool zenflow = false;
  int64_t global_batch() const { return world_size * micro_batch * grad_accum; }
};
RecordedRun read_recorded_run(const std::filesystem::path &checkpoint);

// batch_for_resume (training_checkpoint.hpp): the run's options with train.grad_accum derived from
// the checkpoint it will resume from when checkpoint.resume_batch = "keep" (its global batch kept on
// this run's ranks); else as read.

// Throws when this run's global batch differs from the checkpoint's and checkpoint.resume_batch
// does not accept it ("new"), saying what to set.
void check_global_batch(const RecordedRun &recorded, const RunOptions &options, int world_size,
                        const RunConfig &config, const std::filesystem::path &checkpoint);

// "" when the checkpoint owes no ZenFlow CPU update (or has no ZenFlow state); else what it owes.
std::string zenflow_owed(const std::filesystem::path &checkpoint);

}  // namespace zf
