// training_checkpoint.hpp: a run's checkpoints. What goes into one (this rank's fp32 master and
// optimizer state from the update plan, the CPU and GPU generators), where they go
// (checkpoint.dir, default OUTPUT_DIR/checkpoints, the newest checkpoint.keep kept), and which one
// a run continues from (checkpoint.resume).
#pragma once

#include "checkpoint/checkpoint.hpp"
#include "config/config.hpp"
#include "engine/update_plan.hpp"

#include <memory>
#include <string>

namespace zf {

// A hash of the segment table: a checkpoint only fits the layout that wrote it.
std::string layout_digest(const zf_layout &layout);

// The checkpoint checkpoint.resume names: the newest complete one in the run's checkpoint
// directory (checkpoint.dir, default OUTPUT_DIR/checkpoints) for "auto", none for "never", else
// the directory it names (which must exist).
std::optional<std::filesystem::path> checkpoint_to_resume(const RunConfig &config, const std::string &output_dir,
                                                          Communicator &comm);

class TrainingCheckpoints {
 public:
  // What a checkpoint records about the run that wrote it.
  struct RunIdentity {
    std::string config_file, stage, optimizer;
    uint64_t shard_begin = 0, shard_end = 0;
  };
  TrainingCheckpoints(const RunConfig &config, const std::string &output_dir, Runtime &runtime, const zf_layout &layout,
                      RunIdentity identity);

  // Collective: every rank saves its part of step `step`.
  void save(int64_t step, UpdatePlan &update);
  // Loads the checkpoint that checkpoint.resume names (the newest one for "auto") into the update
  // plan and the generators; returns its step, or 0 when the run starts fresh.
  int64_t resume(UpdatePlan &update);

 private:
  TrainingState state(int64_t step, UpdatePlan &update) const;
  std::string info(int64_t step) const;

  const RunConfig &config_;
  Runtime &runtime_;
  std::string output_dir_;
  std::string layout_digest_;
  RunIdentity identity_;
  std::unique_ptr<CheckpointStore> store_;
};

}  // namespace zf
