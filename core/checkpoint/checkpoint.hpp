// checkpoint.hpp: training checkpoints. A checkpoint is a directory step-NNNNNNNN/ holding one
// safetensors file per rank (its fp32 master shard, its optimizer state, the RNG state) and
// checkpoint.json (step, world size, layout). It appears atomically: every rank writes into
// step-NNNNNNNN.tmp/, files are fsynced, then rank 0 renames the directory into place, so a crash
// mid-save leaves the previous checkpoint intact. Only the newest `keep` of this run (its run id)
// are kept (by step number); a save removes only what this run created (checkpoint_directory.hpp).
// Every tensor carries a checksum (safetensors.hpp), in blocks for ranges, and the metadata its own
// (checkpoint_metadata.hpp): a checkpoint whose bytes changed on disk is found before it is used,
// named by file and tensor. Another layout reads it through reshard.hpp.
#pragma once

#include "checkpoint/checkpoint_directory.hpp"
#include "checkpoint/safetensors.hpp"
#include "comm/communicator.hpp"

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zf {

struct ReshardReport;

// This rank's part of the training state. Tensors are views of the live buffers: save reads
// them, load writes into them (shapes and dtypes must match what was saved).
struct TrainingState {
  int64_t step = 0;
  uint64_t shard_begin = 0, shard_end = 0;
  std::string layout_digest;  // identifies the model's flat layout
  std::string run_name, run_id, config_digest;  // the run's identity (checkpoint_metadata.hpp)
  at::Tensor master;          // fp32 master shard
  std::vector<std::pair<std::string, at::Tensor>> optimizer;  // named optimizer state tensors
  std::vector<TensorPieces> optimizer_pieces;  // ... and those not in memory as a whole (on disk)
  std::vector<std::string> optional;  // optimizer state a checkpoint may lack (keeps its value then)
  at::Tensor rng;             // torch's CPU generator state (uint8)
  at::Tensor device_rng;      // the GPU's generator state (GPU runs; undefined otherwise)
};

// The fp32 master of a whole checkpoint, read from every rank's file, so that any number of ranks
// can read it (zfcore eval): calls take(begin, values) for the shards in order, skipping a rank's
// file whose shard the earlier ones covered (zero0: every rank holds it all). Checks that the
// checkpoint is complete and was written for `layout_digest`. Returns the checkpoint's step.
int64_t read_checkpoint_master(const std::filesystem::path &checkpoint, const std::string &layout_digest,
                               const std::function<void(uint64_t begin, const at::Tensor &values)> &take);


// "" when the checkpoint.json of `checkpoint` is what its save wrote: a regular file of at most 1 MiB,
// JSON nested at most kMaxJsonDepth deep, an object, with the checksum its rank-00000 file records
// (checkpoints of an older zfcore record none); else what is wrong, naming the file. What it records
// of the run (world size, batch, optimizer) is trusted only then.
std::string checkpoint_record_problem(const std::filesystem::path &checkpoint);

// What is wrong with `checkpoint` ("" when it is whole): its checkpoint.json, and the headers,
// metadata and (with `tensors`) tensor checksums of its rank files first_file, first_file + stride,
// ... (all of them by default), each problem naming the file and the tensor.
std::string checkpoint_damage(const std::filesystem::path &checkpoint, int first_file = 0, int stride = 1,
                              bool tensors = true);

class CheckpointStore {
 public:
  CheckpointStore(std::filesystem::path directory, int64_t keep, Communicator &comm);

  const std::filesystem::path &directory() const { return directory_; }
  // Collective: every rank calls it at the same step. Returns the new checkpoint's directory.
  std::filesystem::path save(const TrainingState &state, const std::string &info_json);
  // Collective: the newest whole checkpoint of the run `run_name` in the directory, if any (the ranks
  // check its files between them; other runs' are named in a warning). A damaged newer one is
  // reported, and with `move_damaged_aside` renamed to step-N.damaged (kept for a look, never
  // resumed from nor counted by `keep`) when zfcore wrote it (its ownership marker): a user's
  // directory named like a checkpoint is left where it is.
  // Of a run.name's branches sharing the directory, only those of `output_dir` are considered when
  // it has any (checkpoints_of_output_dir). `latest`: the checkpoint the run last saved (its output
  // directory records it), "" when unknown: checkpoints of later steps were left by a line the run
  // abandoned when it went back to an earlier one; they are named in a warning, not resumed from.
  // `check` (collective, the same text on every rank) says what is damaged in a candidate, "" to take
  // it; by default damage(candidate): a resume that checks as it loads passes its load.
  std::optional<std::filesystem::path> newest_whole(
      const std::string &run_name, const std::string &output_dir, const std::string &latest, bool move_damaged_aside,
      const std::function<std::string(const std::filesystem::path &)> &check = {}) const;
  // Collective: checkpoint_damage(checkpoint), its files shared among the ranks; the same on every rank.
  std::string damage(const std::filesystem::path &checkpoint, bool tensors = true) const;
  // Collective: whether every rank's file of `checkpoint` holds exactly this rank's shard of `state`
  // (the same world size and shard bounds; the stage and offload plugins may differ).
  bool same_layout(const std::filesystem::path &checkpoint, const TrainingState &state) const;
  // Fills `state` from `checkpoint` (this rank's file) when same_layout; checks shard and layout.
  void load(const std::filesystem::path &checkpoint, TrainingState &state) const;
  // Fills `state` from a checkpoint of another layout (reshard.hpp); `bytes_read` gets the bytes of
  // tensor data this rank read.
  ReshardReport load_resharded(const std::filesystem::path &checkpoint, TrainingState &state,
                               const std::vector<std::string> &restart, uint64_t *bytes_read) const;

 private:
  std::filesystem::path directory_;
  int64_t keep_;
  Communicator &comm_;
  std::set<std::string> warned_copies_;  // a user's copy is named once, not at every save
  bool warned_moved_ = false;            // pruning stopped because the directory was moved: said once
};

}  // namespace zf
