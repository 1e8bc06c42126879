// checkpoint_metadata.hpp: what a training checkpoint's rank file records about the run that wrote
// it, in the "__metadata__" of its safetensors header: the step, the world size, the rank's shard
// of the flat parameters, the layout digest and the run's identity (run.name, a run id drawn when
// the run started, a digest of its config). Format 2 adds the identity and "metadata_checksum", a
// checksum over every other field but the tensor checksums (which cover the data themselves): one
// flipped bit in world_size is damage, not another layout. "checkpoint_json" holds the checksum of
// checkpoint.json, so that the run record beside the rank files is covered too. Format 1 (no "format" field) is read
// as before, without identity. Read and checked here, without libtorch, for
// resuming (CheckpointStore::load), for zfcore eval (read_checkpoint_master) and for the fuzz
// targets (tests/fuzz).
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace zf {

struct CheckpointMetadata {
  int64_t step = 0;
  uint64_t world_size = 0;
  uint64_t shard_begin = 0, shard_end = 0;  // this rank's elements of the flat parameters
  std::string layout;                       // layout_digest() of the model that wrote it
  std::string run_name, run_id, config_digest;  // "" in checkpoints of format 1
  // The checksum of the checkpoint's checkpoint.json (what its run recorded: world size, batch,
  // optimizer, output directory), covered by metadata_checksum; "" in checkpoints written before.
  std::string record_checksum;
};

// A new run id: 16 hex digits from the system's random source.
std::string new_run_id();

// The metadata fields as save() writes them (decimal numbers, the digest as is), and back.
// Reading throws zf::Error naming `file` and the field when one is missing or not a number, or
// when the metadata does not match its metadata_checksum.
std::map<std::string, std::string> checkpoint_metadata_fields(const CheckpointMetadata &metadata, int rank);
CheckpointMetadata read_checkpoint_metadata(const std::map<std::string, std::string> &fields, const std::string &file);

}  // namespace zf
