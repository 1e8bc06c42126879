// reshard.hpp: a checkpoint loaded into another layout (another number of ranks, stage plugin,
// offload tier or offload.ratio). The training state is flat: the fp32 master and each optimizer
// tensor of the update are one range of the flat parameter space, cut into the writers' contiguous
// rank shards [shard_begin, shard_end) (zero0: every rank holds all of it). A rank of the new layout
// asks for the elements of its own shard and gets them from whichever rank files hold them,
// reading only those bytes and the checksum blocks around them (BlockChecksums), which it checks:
// no rank reads the whole state unless it owns it. Ranges are read with pread, pieces of a few MiB
// with many in flight (as `zfcore bench disk` reads), each straight into its destination and
// checked there: the disk, not the page faults of a mapping, sets the pace.
#pragma once

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/checkpoint_metadata.hpp"
#include "runtime/error.hpp"

#include <filesystem>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace zf {

// A block of a checkpoint whose bytes do not match their checksum (or a range the file does not
// hold): the checkpoint is damaged, and a resume that may fall back to an older one does.
struct CheckpointDamaged : Error {
  using Error::Error;
};

// Every rank file of one checkpoint, opened (headers parsed, data mapped but not read).
class CheckpointShards {
 public:
  // Checks that the rank files are all there and agree (step, world size, layout, run) and that the
  // step matches the directory's name step-N. Throws zf::Error naming the file.
  static CheckpointShards open(const std::filesystem::path &checkpoint);

  const std::filesystem::path &directory() const { return directory_; }
  const CheckpointMetadata &metadata(int rank = 0) const { return metadata_[size_t(rank)]; }
  int world_size() const { return int(files_.size()); }
  const SafetensorsFile &file(int rank) const { return files_[size_t(rank)]; }
  bool has(const std::string &name) const { return files_[0].has(name); }
  // Whether `name` holds one value per element of each file's shard (the master, the moments).
  bool per_element(const std::string &name) const;
  c10::ScalarType dtype(const std::string &name) const;
  // Elements [begin, end) of the flat parameters of per-element tensor `name`, in its stored dtype,
  // into `out`. Elements past every shard are padding of the writers' layout: zero. The blocks read
  // are checked against their checksums; a mismatch names the file, tensor and byte range.
  void read(const std::string &name, uint64_t begin, uint64_t end, void *out);
  // A whole tensor of one rank's file, checked against its checksum.
  at::Tensor load(int rank, const std::string &name);
  // Elements [first, first + count) of one rank's tensor `name` (flat, in its stored dtype) into
  // `out`, the blocks read checked; a range past the tensor's end names the file (damaged).
  void read_rank(int rank, const std::string &name, uint64_t first, uint64_t count, void *out);
  // Bytes of tensor data read so far (each checked block once).
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  // A tensor written without block checksums, against its whole-tensor checksum (once).
  void check_whole(int rank, const std::string &name);
  // Bytes [byte_begin, byte_end) of rank's tensor `name` into `to`, the blocks they touch checked.
  void copy_checked(int rank, const std::string &name, uint64_t byte_begin, uint64_t byte_end, unsigned char *to);
  // Bytes [offset, offset + bytes) of rank's file into `to` (pread until done); throws naming the file.
  void pread_exactly(int rank, uint64_t offset, uint64_t bytes, unsigned char *to) const;

  struct Descriptor;  // a rank file opened for pread, closed with the last copy of the shards
  std::filesystem::path directory_;
  std::vector<SafetensorsFile> files_;
  std::vector<std::shared_ptr<const Descriptor>> descriptors_;
  std::vector<CheckpointMetadata> metadata_;
  std::set<std::tuple<int, std::string, uint64_t>> checked_;  // (rank, tensor, block); block -1: the whole tensor
  uint64_t bytes_read_ = 0;
};

// What load_resharded did with the optimizer state: read from the checkpoint, or left as this
// run set it up (state the new layout recomputes, or that the checkpoint does not hold).
struct ReshardReport {
  std::vector<std::string> carried, restarted;
};

// Fills `state` (this rank's shard [state.shard_begin, state.shard_end) of the new layout) from
// `shards`: the master and the per-element optimizer state by ranges, state of one value for the
// whole run (offload.ratio's choice) from rank 0's file, the generators from the file of the same
// rank (rank 0's for ranks the writers did not have). Names in `restart` are not read.
ReshardReport load_resharded(CheckpointShards &shards, int rank, TrainingState &state,
                             const std::vector<std::string> &restart);

}  // namespace zf
