// host_plan.hpp: host memory and checkpoint disk as tiers of the one memory plan. The ranks of a
// host share its memory, and every rank's checkpoint file lands in one checkpoint directory: a
// plan is summed per host (and per checkpoint) and set beside what the host and the disk have,
// before anything large is allocated. A plan that does not fit names the settings that would,
// each with its own figure, so `zfcore estimate` and a refused run say the same thing.
#pragma once

#include "memory/memory_plan.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// One rank's bytes per tier (a CPU run's model tier counted as pageable host memory).
struct RankTiers {
  uint64_t device = 0, pinned = 0, pageable = 0, nvme = 0;
  uint64_t host() const { return pinned + pageable; }
};

// What one host must hold, and what could shrink it.
struct HostDemand {
  RankTiers rank;
  int ranks_per_host = 1;
  uint64_t world = 1;
  uint64_t state_on_host = 0;     // of rank.host(): the optimizer's state (moments) per rank
  bool moments_halvable = false;  // the optimizer has moment_dtype and it is not bf16 yet
  bool nvme_available = false;    // the nvme offload plugin is installed
  uint64_t per_host() const { return rank.host() * uint64_t(ranks_per_host); }
};

// The settings that would bring the host's sum within `limit`, each with its figure per host
// ("optimizer.moment_dtype = \"bf16\": 41.2 GiB per host"), or why none does. Only settings this
// run accepts: moment_dtype where the optimizer declares it, the nvme plugin where it is
// installed, fewer ranks per host where one rank fits.
std::string host_ways_out(const HostDemand &demand, uint64_t limit);

// Free disk space for a directory: `limit_gb` > 0 (checkpoint.disk_limit_gb), else what the
// filesystem holding it (or its nearest existing parent) has free for this user.
struct DiskSpace {
  uint64_t bytes = 0;
  std::string source;  // "checkpoint.disk_limit_gb", "free space of /path"
};
DiskSpace disk_space(const std::string &directory, double limit_gb);

// The run's checkpoints on their disk: one checkpoint is every rank's file (fp32 master and
// optimizer state of its shard); at most keep + 1 are there at once (the newest is written
// before the oldest goes), fewer when the run saves fewer.
struct CheckpointDemand {
  std::string directory;
  uint64_t bytes_per_rank = 0;   // master + optimizer state of one shard
  uint64_t state_per_rank = 0;   // of which the optimizer state
  uint64_t world = 1;
  int64_t copies = 0;            // checkpoints on disk at once at most; 0: the run saves none
  int64_t keep = 1;              // checkpoint.keep
  uint64_t existing = 0;         // bytes of checkpoints already in the directory (rotated out as new ones come)
  bool moments_halvable = false;
  uint64_t checkpoint_bytes() const { return bytes_per_rank * world; }
  uint64_t needed() const { return checkpoint_bytes() * uint64_t(copies); }
};
// Saves of a run of `steps` steps (checkpoint.every, checkpoint.final), capped at keep + 1.
int64_t checkpoint_copies(int64_t steps, int64_t every, bool final, int64_t keep);
// Bytes of the complete checkpoints (step-N directories) already in `directory`.
uint64_t existing_checkpoint_bytes(const std::string &directory);

// Throws naming the checkpoint's size, the copies, the directory and its space, and the settings
// that would fit (checkpoint.dir elsewhere, checkpoint.keep = 1, bf16 moments) when they do not.
void check_checkpoint_space(const CheckpointDemand &demand, const DiskSpace &space);

}  // namespace zf
