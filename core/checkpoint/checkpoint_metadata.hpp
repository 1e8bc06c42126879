// checkpoint_metadata.hpp: what a training checkpoint's rank file records about the run that wrote
// it, in the "__metadata__" of its safetensors header: the step, the world size, the rank's shard
// of the flat parameters and the layout digest. Read and checked here, without libtorch, for
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
};

// The metadata fields as save() writes them (decimal numbers, the digest as is), and back.
// Reading throws zf::Error naming `file` and the field when one is missing or not a number.
std::map<std::string, std::string> checkpoint_metadata_fields(const CheckpointMetadata &metadata, int rank);
CheckpointMetadata read_checkpoint_metadata(const std::map<std::string, std::string> &fields, const std::string &file);

}  // namespace zf
