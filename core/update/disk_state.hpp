// disk_state.hpp: optimizer state on the NVMe tier. The state of the shard lives in the offload
// plugin's files (read_tile / write_tile); the optimizer is bound to a window of three tiles per
// state tensor. A tile is updated in its slot (tile index mod 3) while the next tile is read into
// the following slot and the previous one is written from the slot before, so the disk is never
// idle while the CPU computes.
//
// The optimizer's views for a tile in slot s start s tiles before the tile (inside the master, since
// tile t >= s), so that element i of the views pairs with element i of the window: the optimizer
// needs no change to run on tiles.
#pragma once

#include "checkpoint/safetensors.hpp"
#include "plugin/plugin_kinds.hpp"
#include "runtime/runtime.hpp"

#include <functional>

namespace zf {

class DiskState {
 public:
  static constexpr uint64_t kSlots = 3;
  // tile_numel: elements per tile (rounded up so that every tile is 4096-byte aligned on disk).
  DiskState(Runtime &runtime, const OffloadPlugin &offload, std::vector<StateSpec> specs, uint64_t numel,
            uint64_t tile_numel);
  ~DiskState();

  uint64_t tile_numel() const { return tile_; }
  uint64_t window_numel() const { return kSlots * tile_; }
  // The window (kSlots tiles per state tensor) on `tier`, for bind_state; `tags` name them.
  std::vector<torch::Tensor> allocate(zf_tier tier, const std::vector<std::string> &tags);
  // After bind_state wrote the initial values into the window: every tile gets them on disk.
  void write_initial();

  // Runs step(lo, hi, base) for the part [lo, hi) of [begin, end) in each tile, in order, with
  // the tile's state in the window: the optimizer's views start at shard element `base`.
  using Step = std::function<void(uint64_t lo, uint64_t hi, uint64_t base)>;
  void update(uint64_t begin, uint64_t end, const Step &step);
  // Completes every read and write (before anything else touches the window or the files).
  void flush();

  // Elements `ranges` (sorted shard ranges) of state tensor `spec`, one after the other, into
  // `compact` (to_disk = false) or from it into the state (to_disk = true). ZenFlow's selected
  // columns move between the disk and the device this way.
  void copy_ranges(size_t spec, const std::vector<zf_optimizer_range> &ranges, void *compact, bool to_disk);

  // State tensors for checkpoints, read and written tile by tile through the window.
  std::vector<TensorPieces> pieces();

  uint64_t bytes_read() const { return bytes_read_; }
  uint64_t bytes_written() const { return bytes_written_; }

 private:
  void acquire(uint64_t tile);  // the tile's state is in its slot
  // Queues the tile of every state tensor, or of tensor `only`, from disk into the slot or back.
  void move(uint64_t tile, uint64_t slot, int only, bool to_disk);
  void read(uint64_t tile, uint64_t slot, int only = -1) { move(tile, slot, only, false); }
  void write(uint64_t tile, uint64_t slot, int only = -1) { move(tile, slot, only, true); }
  void wait();
  uint64_t io_bytes(uint64_t tile, size_t spec) const;  // the tile's bytes on disk, 4096-aligned
  char *slot_data(size_t spec, uint64_t slot) const;

  Runtime &runtime_;
  const OffloadPlugin &offload_;
  std::vector<StateSpec> specs_;
  uint64_t numel_, tile_, tiles_;
  std::vector<torch::Tensor> window_;
  static constexpr uint64_t kNone = ~uint64_t(0);
  uint64_t ahead_ = kNone;  // the tile whose read into its slot was issued last
  uint64_t bytes_read_ = 0, bytes_written_ = 0;
};

}  // namespace zf
