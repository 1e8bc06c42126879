#include "update/disk_state.hpp"

#include "runtime/tensors.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <cstring>

namespace zf {

namespace {
constexpr uint64_t kAlignment = 4096;
uint64_t round_up(uint64_t value, uint64_t unit) { return (value + unit - 1) / unit * unit; }
}  // namespace

DiskState::DiskState(Runtime &runtime, const OffloadPlugin &offload, std::vector<StateSpec> specs, uint64_t numel,
                     uint64_t tile_numel)
    : runtime_(runtime), offload_(offload), specs_(std::move(specs)), numel_(numel) {
  // Whole 4096-byte pages for every dtype of one byte or more.
  tile_ = std::max<uint64_t>(kAlignment, round_up(std::min(tile_numel, numel), kAlignment));
  tiles_ = (numel + tile_ - 1) / tile_;
  ZF_REQUIRE(offload.has_tiles(),
             "offload plugin '%s' puts the optimizer state on the NVMe tier but has no read_tile, write_tile and "
             "wait", offload.name());
}

DiskState::~DiskState() {
  try {
    wait();
  } catch (...) {  // the run is ending with the error that got it here
  }
}

std::vector<torch::Tensor> DiskState::allocate(zf_tier tier, const std::vector<std::string> &tags) {
  for (size_t i = 0; i < specs_.size(); ++i)
    window_.push_back(ledger_tensor(runtime_.memory, tier, window_numel(), specs_[i].dtype, tags[i],
                                    /*zero=*/false));
  return window_;
}

void DiskState::write_initial() {
  for (uint64_t tile = 0; tile < tiles_; ++tile) write(tile, 0);  // every slot holds the initial values
  wait();
  ahead_ = kNone;
}

char *DiskState::slot_data(size_t spec, uint64_t slot) const {
  return static_cast<char *>(window_[spec].data_ptr()) + slot * tile_ * window_[spec].element_size();
}

uint64_t DiskState::io_bytes(uint64_t tile, size_t spec) const {
  const uint64_t count = std::min(tile_, numel_ - tile * tile_);
  return round_up(count * c10::elementSize(specs_[spec].dtype), kAlignment);
}

void DiskState::move(uint64_t tile, uint64_t slot, int only, bool to_disk) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (only >= 0 && size_t(only) != i) continue;
    const uint64_t offset = tile * tile_ * c10::elementSize(specs_[i].dtype), bytes = io_bytes(tile, i);
    if (to_disk) offload_.write_tile(uint32_t(i), offset, slot_data(i, slot), bytes);
    else offload_.read_tile(uint32_t(i), offset, slot_data(i, slot), bytes);
    (to_disk ? bytes_written_ : bytes_read_) += bytes;
  }
}

void DiskState::wait() {
  Timers &timers = runtime_.timers;
  const uint32_t timer = timers.id("disk_wait");  // the CPU update waits for the disk
  timers.start(timer);
  offload_.wait();
  timers.stop(timer);
}

void DiskState::flush() { wait(); }

// Every read and write issued before is complete afterwards, so a slot is never read into while
// its previous tile is still being written (slot t+1 mod 3 last held tile t-2).
void DiskState::acquire(uint64_t tile) {
  if (ahead_ != tile) {  // the first tile, or out of order (buckets in backward order)
    wait();
    read(tile, tile % kSlots);
  }
  wait();
  ahead_ = kNone;
  if (tile + 1 < tiles_) {
    read(tile + 1, (tile + 1) % kSlots);
    ahead_ = tile + 1;
  }
}

void DiskState::update(uint64_t begin, uint64_t end, const Step &step) {
  for (uint64_t tile = begin / tile_; tile * tile_ < end; ++tile) {
    const uint64_t slot = tile % kSlots;
    acquire(tile);
    step(std::max(begin, tile * tile_), std::min(end, (tile + 1) * tile_), (tile - slot) * tile_);
    write(tile, slot);
  }
}

void DiskState::copy_ranges(size_t spec, const std::vector<zf_optimizer_range> &ranges, void *compact,
                            bool to_disk) {
  const uint64_t element = c10::elementSize(specs_[spec].dtype);
  char *cursor = static_cast<char *>(compact);
  wait();
  ahead_ = kNone;
  size_t r = 0;
  uint64_t from = ranges.empty() ? 0 : ranges[0].begin;  // the next element of ranges[r] to copy
  while (r < ranges.size()) {
    const uint64_t tile = from / tile_, tile_begin = tile * tile_, tile_end = std::min(numel_, tile_begin + tile_);
    read(tile, 0, int(spec));
    wait();
    char *slot = slot_data(spec, 0);
    while (r < ranges.size() && from < tile_end) {
      const uint64_t to = std::min(ranges[r].end, tile_end);
      char *state = slot + (from - tile_begin) * element;
      const uint64_t bytes = (to - from) * element;
      if (to_disk) std::memcpy(state, cursor, bytes);
      else std::memcpy(cursor, state, bytes);
      cursor += bytes;
      from = to;
      if (from == ranges[r].end && ++r < ranges.size()) from = ranges[r].begin;
    }
    if (to_disk) {
      write(tile, 0, int(spec));
      wait();
    }
  }
}

std::vector<TensorPieces> DiskState::pieces() {
  std::vector<TensorPieces> out;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const uint64_t element = c10::elementSize(specs_[i].dtype);
    TensorPieces p;
    p.name = specs_[i].name;
    p.dtype = specs_[i].dtype;
    p.numel = numel_;
    p.piece_numel = tile_;
    // Through slot 0, one tile at a time; whatever was read ahead is gone afterwards.
    p.read = [this, i, element](uint64_t first, uint64_t count, void *out) {
      wait();
      ahead_ = kNone;
      read(first / tile_, 0, int(i));
      wait();
      std::memcpy(out, slot_data(i, 0), count * element);
    };
    p.write = [this, i, element](uint64_t first, uint64_t count, const void *in) {
      wait();
      ahead_ = kNone;
      std::memset(slot_data(i, 0), 0, tile_ * element);  // the part past the shard's end, if any
      std::memcpy(slot_data(i, 0), in, count * element);
      write(first / tile_, 0, int(i));
      wait();
    };
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace zf
