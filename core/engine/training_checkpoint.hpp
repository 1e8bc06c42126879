// training_checkpoint.hpp: a run's checkpoints. What goes into one (this rank's fp32 master and
// optimizer state from the update plan, the CPU and GPU generators), where they go
// (checkpoint.dir, default OUTPUT_DIR/checkpoints, the newest checkpoint.keep kept), and which one
// a run continues from (checkpoint.resume).
#pragma once

#include "checkpoint/checkpoint.hpp"
#include "config/config.hpp"
#include "update/update_plan.hpp"

#include <cmath>
#include <limits>
#include <memory>
#include <string>

namespace zf {

// A hash of the segment table: a checkpoint only fits the layout that wrote it.
std::string layout_digest(const zf_layout &layout);

// The run's checkpoint directory: checkpoint.dir, default OUTPUT_DIR/checkpoints.
std::string checkpoint_dir(const RunConfig &config, const std::string &output_dir);

// Collective: the checkpoint checkpoint.resume names, its files checked: the newest whole one of
// this run.name in the run's checkpoint directory for "auto" (a damaged newer one is reported and, with
// `move_damaged_aside`, renamed step-N.damaged), none for "never", else the directory it names
// (which must exist and be whole; `check_tensors` = false: its tensors are left to the caller).
// `check`: for "auto", what is damaged in a candidate ("" takes it; CheckpointStore::newest_whole).
std::optional<std::filesystem::path> checkpoint_to_resume(
    const RunConfig &config, const std::string &output_dir, Communicator &comm, bool move_damaged_aside,
    bool check_tensors = true, const std::function<std::string(const std::filesystem::path &)> &check = {});
// Collective: refuses a checkpoint named by hand whose files (`tensors`: also their tensors) are damaged.
void require_undamaged(const RunConfig &config, const CheckpointStore &store, const std::filesystem::path &checkpoint,
                       bool tensors);

// checkpoint.resume, zfcore export and zfcore checkpoint info name one checkpoint (a step-N directory
// with its checkpoint.json). Throws zf::Error starting with `what` (the key or the argument) when
// `dir` is a Hugging Face model, a run's output directory or a directory of checkpoints: it says which,
// and names the newest checkpoint in it (`resume`: and how checkpoint.resume = "auto" would find it).
void require_one_checkpoint(const std::string &dir, const std::string &what, bool resume);

class DataSource;
class Placement;
class PluginSet;
struct RunOptions;

// Collective: the checkpoint the run in `output_dir` saved last (OUTPUT_DIR/.zfcore-latest, read by
// rank 0), "" when none is recorded: after going back to an earlier checkpoint, resume = "auto"
// and zfcore eval follow the line it continued, not the later checkpoints it left.
std::string latest_saved(const std::string &output_dir, Communicator &comm);
// Rank 0, after each save: records `checkpoint` (absolute) as the run's last save in `output_dir`;
// throws zf::Error saying the checkpoint is whole and how to resume it when the record cannot be
// written (a full disk).
void record_latest_saved(const std::string &output_dir, const std::string &checkpoint);

// The run's options, with train.grad_accum derived when checkpoint.resume_batch = "keep" (resume_layout.hpp).
RunOptions batch_for_resume(const RunConfig &config, Communicator &comm);

class TrainingCheckpoints {
 public:
  // What a checkpoint records about the run that wrote it.
  struct RunIdentity {
    std::string config_file, stage, optimizer;
    std::vector<std::string> optimizer_state;  // the names of its state tensors (OptimizerPlugin::state_names)
    uint64_t shard_begin = 0, shard_end = 0;
    std::string offload;                       // the offload plugin
    bool zenflow = false;
    int64_t micro_batch = 0, grad_accum = 0;   // with the world size: the global batch
    // The training data: data.path, its training sequences and their DataSource::sampled_digest()
    // ("": not checked, as in zfcore export, which reads no data).
    std::string data_path, data_digest;
    int64_t data_sequences = 0;
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
  // Loads the checkpoint that checkpoint.resume names (the newest one of this run.name for "auto")
  // into the update plan and the generators, on this layout whatever layout wrote it (what changed
  // is printed), and makes the working parameters `params_shard` match it (UpdatePlan::restore);
  // returns its step, or 0 when the run starts fresh.
  int64_t resume(UpdatePlan &update, const torch::Tensor &params_shard);
  // Collective, after resume(): stops before step 1 when a step-N directory that a save of the
  // steps (start_step, last_step] would replace is not this run's (a user's, another run's).
  void check_saves(int64_t start_step, int64_t last_step) const;
  // The run's initial loss, given this run's first step and its loss: step 1's (recorded for the
  // checkpoints), or the one the checkpoint resumed from carries (checkpoint.json "initial_loss";
  // where an older zfcore's has none, this run's first loss).
  double initial_loss(int64_t first_step, double loss) {
    if (first_step == 1) initial_loss_ = loss;
    return std::isnan(initial_loss_) ? loss : initial_loss_;
  }
  // Whether the checkpoint resumed from was written by another layout.
  bool resharded() const { return resharded_; }
  // After a resume from a checkpoint outside this run's checkpoint.dir, with nothing to train: saves
  // the state at `step` there, in this run's layout (converts the checkpoint).
  void save_converted(int64_t step, UpdatePlan &update);

 private:
  TrainingState state(int64_t step, UpdatePlan &update) const;
  std::string info(int64_t step) const;
  void load_other_layout(const std::filesystem::path &from, TrainingState &loaded, UpdatePlan &update);

  const RunConfig &config_;
  Runtime &runtime_;
  const zf_layout &layout_;
  std::string output_dir_;
  // Both resolved once, at the start (links followed): what checkpoint.json and .zfcore-latest record,
  // however the paths given resolve later (a link in them changed mid-run, runtime/files_held.hpp).
  std::string output_dir_at_start_;
  std::filesystem::path store_at_start_;
  std::string layout_digest_;
  RunIdentity identity_;
  std::unique_ptr<CheckpointStore> store_;
  int64_t saved_step_ = 0;
  std::filesystem::path saved_path_;
  std::vector<std::pair<std::string, std::string>> model_;  // checkpoint.json "model" (checkpoint_model.hpp)
  std::string run_name_, run_id_, config_digest_;  // a new run id, or the id of the run it continues
  bool resharded_ = false;
  bool converting_ = false;  // save_converted: no step ran since the resume
  double initial_loss_ = std::numeric_limits<double>::quiet_NaN();
};

// What the run's checkpoints record about it: its plugins, shard, batch, whether ZenFlow runs and
// its training data (nullptr: none read, as in zfcore export).
TrainingCheckpoints::RunIdentity run_identity(const RunConfig &config, const PluginSet &plugins,
                                              const RunOptions &options, const Placement &placement,
                                              const DataSource *data);

}  // namespace zf
