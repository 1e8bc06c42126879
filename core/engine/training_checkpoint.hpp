// training_checkpoint.hpp: a run's checkpoints. What goes into one (this rank's fp32 master and
// optimizer state from the update plan, the CPU and GPU generators), where they go
// (checkpoint.dir, default OUTPUT_DIR/checkpoints, the newest checkpoint.keep kept), and which one
// a run continues from (checkpoint.resume).
#pragma once

#include "checkpoint/checkpoint.hpp"
#include "config/config.hpp"
#include "update/update_plan.hpp"

#include <memory>
#include <string>

namespace zf {

// A hash of the segment table: a checkpoint only fits the layout that wrote it.
std::string layout_digest(const zf_layout &layout);

// The run's checkpoint directory: checkpoint.dir, default OUTPUT_DIR/checkpoints.
std::string checkpoint_dir(const RunConfig &config, const std::string &output_dir);

// Collective: the checkpoint checkpoint.resume names, its files checked: the newest whole one in
// the run's checkpoint directory for "auto" (a damaged newer one is reported and, with
// `move_damaged_aside`, renamed step-N.damaged), none for "never", else the directory it names
// (which must exist and be whole).
std::optional<std::filesystem::path> checkpoint_to_resume(const RunConfig &config, const std::string &output_dir,
                                                          Communicator &comm, bool move_damaged_aside);

// Collective: "" when every value of `values`, this rank's elements [begin, ...) of the flat
// parameters of `layout`, is finite on every rank; else the first one that is not and the parameter
// it belongs to (the same text on every rank).
std::string non_finite_parameter(const at::Tensor &values, uint64_t begin, const zf_layout &layout,
                                 Communicator &comm);

class TrainingCheckpoints {
 public:
  // What a checkpoint records about the run that wrote it.
  struct RunIdentity {
    std::string config_file, stage, optimizer;
    std::vector<std::string> optimizer_state;  // the names of its state tensors (OptimizerPlugin::state_names)
    uint64_t shard_begin = 0, shard_end = 0;
  };
  TrainingCheckpoints(const RunConfig &config, const std::string &output_dir, Runtime &runtime, const zf_layout &layout,
                      RunIdentity identity);

  // Collective: every rank saves its part of step `step`. Weights or optimizer state that are not
  // finite are never saved: the run stops, naming the step, the value and the newest checkpoint.
  void save(int64_t step, UpdatePlan &update);
  // The step of the newest checkpoint this run saved or resumed from (0: none), and its directory.
  int64_t saved_step() const { return saved_step_; }
  const std::filesystem::path &saved_path() const { return saved_path_; }
  // "the newest checkpoint is DIR (step N)", or that there is none: for messages that stop the run.
  std::string newest() const;
  // Loads the checkpoint that checkpoint.resume names (the newest one for "auto") into the update
  // plan and the generators; returns its step, or 0 when the run starts fresh.
  int64_t resume(UpdatePlan &update);

 private:
  TrainingState state(int64_t step, UpdatePlan &update) const;
  // checkpoint.json records the optimizer and stage that wrote it: another optimizer's state is refused.
  void check_same_optimizer(const std::filesystem::path &checkpoint) const;
  std::string info(int64_t step) const;

  const RunConfig &config_;
  Runtime &runtime_;
  const zf_layout &layout_;
  std::string output_dir_;
  std::string layout_digest_;
  RunIdentity identity_;
  std::unique_ptr<CheckpointStore> store_;
  int64_t saved_step_ = 0;
  std::filesystem::path saved_path_;
};

}  // namespace zf
