// resume_layout.hpp: a checkpoint continued on another layout (number of ranks, stage, offload
// tier, ZenFlow), said rather than guessed. What the checkpoint's run recorded (checkpoint.json),
// the global batch (micro_batch x grad_accum x ranks: a change is refused unless
// checkpoint.resume_batch says how to continue), and how ZenFlow's own state crosses: resharded,
// with the CPU updates a checkpoint owes to the writer's staggered groups applied at the first step.
#pragma once

#include "config/config.hpp"
#include "engine/run_options.hpp"
#include "engine/training_checkpoint.hpp"

#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace zf {

// What checkpoint.json records about the run that wrote it ("" or 0 where an older zfcore did not, and
// all of it when checkpoint.json is not what its save wrote: checkpoint_record_problem).
struct RecordedRun {
  int64_t world_size = 0, micro_batch = 0, grad_accum = 0;
  std::string config, stage, offload, optimizer, run_name, run_id, config_digest;  // config: the file it ran
  std::string output_dir;  // the run's output directory, absolute ("" before zfcore recorded it)
  bool zenflow = false;
  double initial_loss = std::numeric_limits<double>::quiet_NaN();  // the run's loss at step 1 (NaN: not recorded)
  std::string data_path, data_digest;  // checkpoint.json "data" (TrainingCheckpoints::RunIdentity); "": not recorded
  int64_t data_sequences = 0;
  // The config the run was made from (checkpoint.json "run_config"; has_config false: not recorded).
  bool has_config = false;
  std::string config_text, config_directory;  // the config, and the directory its relative paths start from
  std::vector<std::string> config_set, config_unset;
  int64_t global_batch() const { return world_size * micro_batch * grad_accum; }
};
RecordedRun read_recorded_run(const std::filesystem::path &checkpoint);
// checkpoint.json is read up to 1 MiB: the config text it records stays well under that.
constexpr size_t kMaxRecordedConfigBytes = size_t(256) << 10;

// batch_for_resume (training_checkpoint.hpp): the run's options with train.grad_accum derived from
// the checkpoint it will resume from when checkpoint.resume_batch = "keep" (its global batch kept on
// this run's ranks); else as read.

// Throws when this run's global batch differs from the checkpoint's and checkpoint.resume_batch
// does not accept it ("new"), saying what to set.
void check_global_batch(const RecordedRun &recorded, const RunOptions &options, int world_size,
                        const RunConfig &config, const std::filesystem::path &checkpoint);

// checkpoint.json records the optimizer that wrote it: a checkpoint of another optimizer's state is
// refused (`mine`: this run's), saying how to go on.
void check_same_optimizer(const std::filesystem::path &checkpoint, const TrainingCheckpoints::RunIdentity &mine);

// Throws when the checkpoint was trained on other data than this run reads (another count of
// sequences or another sampled digest) and checkpoint.resume_data is not "new", saying how to go on;
// with "new", `say` prints that the run continues on other data.
void check_same_data(const RecordedRun &recorded, const TrainingCheckpoints::RunIdentity &mine,
                     const RunConfig &config, const std::filesystem::path &checkpoint, bool say);

// Whether the checkpoint holds ZenFlow state (false where its first rank file cannot be read: the load says why).
bool has_zenflow_state(const std::filesystem::path &checkpoint);
// "" when the checkpoint owes no ZenFlow CPU update (or has no ZenFlow state); else what it owes.
std::string zenflow_owed(const std::filesystem::path &checkpoint);

// How ZenFlow's own state crosses from a checkpoint to this run's other layout (`state`: this run's
// tensors). Its per-element tensors (working parameters, gradient sums, staging, look-ahead) are
// read by ranges like the master; the mask, counters and topk_ratio are the run's, the same on every
// rank; the staggered groups are each rank's and are inherited (`inherit`: inherited_schedule()).
// A checkpoint without ZenFlow state leaves ZenFlow to start afresh (`fresh`). Throws when the
// checkpoint owes CPU updates this run cannot apply: no [zenflow] table, another zenflow.schedule,
// or a checkpoint of a zfcore that did not record its groups' bounds.
struct ZenFlowCrossing {
  std::vector<std::string> restart;  // names load_resharded leaves to this run
  bool fresh = false, inherit = false;
  std::string said;                  // what the run prints about it
};
ZenFlowCrossing zenflow_crossing(const std::filesystem::path &checkpoint, const TrainingState &state);

// The writer's staggered groups cut to this rank's elements [begin, end) of the flat parameters, with
// the CPU results that wait in its zenflow.staging.
InheritedSchedule inherited_schedule(const std::filesystem::path &checkpoint, uint64_t begin, uint64_t end,
                                     bool last_cpu_carried);

// zenflow.staging holds the waiting CPU result from its first element: a group's under the staggered
// schedule, the shard under the deepspeed one. Whether the own-layout load reads rank's file: true for
// the same size (or no ZenFlow), and for the whole shard that a zfcore before the staggered schedule's
// staging held one group wrote: taken out of `state` into *whole, and once the schedule is restored
// read_whole_staging reads the waiting elements ([begin, end) of the shard: UpdatePlan::waiting) into
// its start; false for another schedule's or update_interval's: load_other_layout says what crosses.
bool own_staging(const std::filesystem::path &checkpoint, int rank, TrainingState &state, torch::Tensor *whole);
void read_whole_staging(const std::filesystem::path &checkpoint, int rank, std::pair<uint64_t, uint64_t> waiting,
                        torch::Tensor &staging);

}  // namespace zf
