#include "checkpoint/reshard.hpp"

#include "checkpoint/checksum.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/parallel.hpp"

#include <ATen/ATen.h>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace zf {
namespace fs = std::filesystem;

namespace {

std::string rank_file_name(int rank) { return format("rank-%05d.safetensors", rank); }

bool listed(const std::vector<std::string> &names, const std::string &name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// Pieces of 4 MiB (whole checksum blocks), 16 of them in flight: the requests `zfcore bench disk`
// keeps in flight by default, 1 MiB each, bring a disk to its read bandwidth; through the page cache
// the kernel cuts each pread into its read-ahead window, so a piece is several requests.
constexpr uint64_t kPiece = uint64_t(4) << 20;
constexpr int kInFlight = 16;

}  // namespace

struct CheckpointShards::Descriptor {
  int fd = -1;
  uint64_t data_begin = 0;  // the data section's first byte in the file
  ~Descriptor() {
    if (fd >= 0) ::close(fd);
  }
};

CheckpointShards CheckpointShards::open(const fs::path &checkpoint) {
  ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
             checkpoint.c_str());
  CheckpointShards shards;
  shards.directory_ = checkpoint;
  uint64_t world = 1;
  for (uint64_t rank = 0; rank < world; ++rank) {
    const fs::path path = checkpoint / rank_file_name(int(rank));
    ZF_REQUIRE(fs::exists(path), "%s has no file for rank %llu of %llu (the checkpoint is incomplete)",
               checkpoint.c_str(), (unsigned long long)rank, (unsigned long long)world);
    SafetensorsFile file = SafetensorsFile::open(path.string());
    CheckpointMetadata metadata = read_checkpoint_metadata(file.metadata(), path.string());
    auto descriptor = std::make_shared<Descriptor>();
    std::string why;
    descriptor->fd = open_regular_file(path.string(), &why);
    ZF_REQUIRE(descriptor->fd >= 0, "%s: cannot open: %s", path.c_str(), why.c_str());
    unsigned char length[8];
    ZF_REQUIRE(::pread(descriptor->fd, length, 8, 0) == 8, "%s: cannot read its header length", path.c_str());
    for (int i = 7; i >= 0; --i) descriptor->data_begin = descriptor->data_begin << 8 | length[i];
    descriptor->data_begin += 8;  // the mapping's header check bounded it
    if (rank == 0) {
      world = metadata.world_size;
      const int64_t named = checkpoint_step_of_name(checkpoint);
      ZF_REQUIRE(named < 0 || named == metadata.step,
                 "%s holds step %lld, not the step of its name (copied or renamed?): resume it under its own name "
                 "step-%08lld", path.c_str(), (long long)metadata.step, (long long)metadata.step);
    } else {
      const CheckpointMetadata &first = shards.metadata_[0];
      ZF_REQUIRE(metadata.world_size == first.world_size && metadata.step == first.step &&
                     metadata.layout == first.layout && metadata.run_id == first.run_id,
                 "%s was written by another save than %s (step %lld of %llu ranks, against step %lld of %llu): the "
                 "checkpoint is mixed up; resume from another one", path.c_str(),
                 (checkpoint / rank_file_name(0)).c_str(), (long long)metadata.step,
                 (unsigned long long)metadata.world_size, (long long)first.step, (unsigned long long)first.world_size);
    }
    shards.files_.push_back(std::move(file));
    shards.metadata_.push_back(std::move(metadata));
    shards.descriptors_.push_back(std::move(descriptor));
  }
  return shards;
}

bool CheckpointShards::per_element(const std::string &name) const {
  bool any = false;
  for (size_t r = 0; r < files_.size(); ++r) {
    if (!files_[r].has(name)) return false;
    const TensorInfo &info = files_[r].info(name);
    uint64_t numel = 1;
    for (int64_t d : info.shape) numel *= uint64_t(d);
    const uint64_t shard = metadata_[r].shard_end - metadata_[r].shard_begin;
    if (info.shape.size() != 1 || numel != shard) return false;
    any = any || shard > 0;
  }
  return any;
}

c10::ScalarType CheckpointShards::dtype(const std::string &name) const {
  return safetensors_dtype(files_[0].info(name).dtype_name);
}

void CheckpointShards::check_whole(int rank, const std::string &name) {
  const SafetensorsFile &file = files_[size_t(rank)];
  const auto [data, size] = file.bytes(name);
  if (!checked_.insert({rank, name, UINT64_MAX}).second) return;
  const std::string recorded = file.checksum(name);
  bytes_read_ += size;
  if (recorded.empty()) return;  // a checkpoint of a zfcore without checksums: its structure was checked
  const std::string actual = checksum_hex(data, size);
  if (actual != recorded)
    throw CheckpointDamaged(format("%s: tensor '%s' does not match its checksum (written %s, read %s): the checkpoint "
                                   "is damaged; resume from another one (checkpoint.resume = DIR)", file.path().c_str(),
                                   name.c_str(), recorded.c_str(), actual.c_str()));
}

void CheckpointShards::pread_exactly(int rank, uint64_t offset, uint64_t bytes, unsigned char *to) const {
  const Descriptor &file = *descriptors_[size_t(rank)];
  while (bytes > 0) {
    const ssize_t got = ::pread(file.fd, to, size_t(std::min<uint64_t>(bytes, uint64_t(1) << 30)), off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw CheckpointDamaged(format("%s: cannot read %llu bytes at offset %llu: %s", files_[size_t(rank)].path().c_str(),
                                     (unsigned long long)bytes, (unsigned long long)offset,
                                     got < 0 ? std::strerror(errno) : "the file ends before them"));
    to += got, offset += uint64_t(got), bytes -= uint64_t(got);
  }
}

// Pieces of whole checksum blocks, several in flight (parallel_waiting). A piece inside the range is
// read straight into `to` and checked there; one that reaches past either end (the range's first and
// last blocks) goes through a buffer of its own. Each block is checked once, by the thread that reads it.
void CheckpointShards::copy_checked(int rank, const std::string &name, uint64_t byte_begin, uint64_t byte_end,
                                    unsigned char *to) {
  if (byte_end <= byte_begin) return;
  const SafetensorsFile &file = files_[size_t(rank)];
  const uint64_t size = file.bytes(name).second;
  const uint64_t at = descriptors_[size_t(rank)]->data_begin + file.info(name).begin;  // the tensor in the file
  const BlockChecksumList blocks = parse_block_checksums(file.block_checksums(name), size);
  if (blocks.block_bytes == 0) {  // one checksum for the whole tensor: checked whole, then read
    check_whole(rank, name);
    const uint64_t bytes = byte_end - byte_begin;
    parallel_waiting(int64_t((bytes + kPiece - 1) / kPiece), kInFlight, [&](int64_t p) {
      const uint64_t lo = uint64_t(p) * kPiece, hi = std::min(bytes, lo + kPiece);
      pread_exactly(rank, at + byte_begin + lo, hi - lo, to + lo);
    });
    return;
  }
  const uint64_t block_bytes = blocks.block_bytes, first = byte_begin / block_bytes;
  const uint64_t count = (byte_end - 1) / block_bytes + 1 - first;
  std::vector<char> unchecked(count);
  for (uint64_t i = 0; i < count; ++i) {
    unchecked[i] = checked_.insert({rank, name, first + i}).second;
    if (unchecked[i]) bytes_read_ += std::min(size, (first + i + 1) * block_bytes) - (first + i) * block_bytes;
  }
  const uint64_t per_piece = std::max<uint64_t>(1, kPiece / block_bytes);
  parallel_waiting(int64_t((count + per_piece - 1) / per_piece), kInFlight, [&](int64_t p) {
    const uint64_t i_begin = uint64_t(p) * per_piece, i_end = std::min(count, i_begin + per_piece);
    const uint64_t lo = (first + i_begin) * block_bytes, hi = std::min(size, (first + i_end) * block_bytes);
    const uint64_t from = std::max(lo, byte_begin), upto = std::min(hi, byte_end);
    if (std::find(unchecked.begin() + int64_t(i_begin), unchecked.begin() + int64_t(i_end), 1) ==
        unchecked.begin() + int64_t(i_end)) {  // read and checked before (two ranges sharing a block)
      pread_exactly(rank, at + from, upto - from, to + (from - byte_begin));
      return;
    }
    std::vector<unsigned char> buffer;
    unsigned char *piece = to + (lo - byte_begin);
    if (lo < byte_begin || hi > byte_end) {
      buffer.resize(hi - lo);
      piece = buffer.data();
    }
    pread_exactly(rank, at + lo, hi - lo, piece);
    for (uint64_t i = i_begin; i < i_end; ++i) {
      if (!unchecked[i]) continue;
      const uint64_t block = first + i, b_lo = block * block_bytes, b_hi = std::min(size, b_lo + block_bytes);
      const std::string actual = checksum_hex(piece + (b_lo - lo), b_hi - b_lo);
      if (actual != blocks.hex[block])
        throw CheckpointDamaged(format("%s: tensor '%s' bytes [%llu, %llu) do not match their checksum (written %s, "
                                       "read %s): the checkpoint is damaged; resume from another one "
                                       "(checkpoint.resume = DIR)", file.path().c_str(), name.c_str(),
                                       (unsigned long long)b_lo, (unsigned long long)b_hi, blocks.hex[block].c_str(),
                                       actual.c_str()));
    }
    if (!buffer.empty()) std::memcpy(to + (from - byte_begin), piece + (from - lo), upto - from);
  });
}

void CheckpointShards::read(const std::string &name, uint64_t begin, uint64_t end, void *out) {
  const uint64_t element = c10::elementSize(dtype(name));
  auto *to = static_cast<unsigned char *>(out);
  uint64_t covered_end = 0;
  for (const CheckpointMetadata &m : metadata_) covered_end = std::max(covered_end, m.shard_end);
  uint64_t at = begin;
  while (at < end) {
    int owner = -1;
    for (size_t r = 0; r < metadata_.size() && owner < 0; ++r)
      if (metadata_[r].shard_begin <= at && at < metadata_[r].shard_end) owner = int(r);
    if (owner < 0) {
      if (at < covered_end)
        throw CheckpointDamaged(format("%s: no rank file holds element %llu of the flat parameters (the shards leave "
                                       "a gap): the checkpoint is damaged", directory_.c_str(), (unsigned long long)at));
      std::memset(to + (at - begin) * element, 0, (end - at) * element);  // the writers' layout ended: padding
      return;
    }
    const CheckpointMetadata &m = metadata_[size_t(owner)];
    const uint64_t upto = std::min(end, m.shard_end);
    const uint64_t byte_begin = (at - m.shard_begin) * element, byte_end = (upto - m.shard_begin) * element;
    copy_checked(owner, name, byte_begin, byte_end, to + (at - begin) * element);
    at = upto;
  }
}

at::Tensor CheckpointShards::load(int rank, const std::string &name) {
  const SafetensorsFile &file = files_[size_t(rank)];
  const TensorInfo &info = file.info(name);
  at::Tensor tensor = at::empty(info.shape, at::TensorOptions().dtype(safetensors_dtype(info.dtype_name)));
  copy_checked(rank, name, 0, file.bytes(name).second, static_cast<unsigned char *>(tensor.data_ptr()));
  return tensor;
}

void CheckpointShards::read_rank(int rank, const std::string &name, uint64_t first, uint64_t count, void *out) {
  const uint64_t element = c10::elementSize(dtype(name)), size = files_[size_t(rank)].bytes(name).second;
  if ((first + count) * element > size)
    throw CheckpointDamaged(format("%s: tensor '%s' holds %llu elements, not the %llu to %llu read: the checkpoint is "
                                   "damaged", files_[size_t(rank)].path().c_str(), name.c_str(),
                                   (unsigned long long)(size / element), (unsigned long long)first,
                                   (unsigned long long)(first + count)));
  copy_checked(rank, name, first * element, (first + count) * element, static_cast<unsigned char *>(out));
}

namespace {

// Elements [begin, end) of `name` into `destination` (any device and dtype), a slice at a time.
void read_into(CheckpointShards &shards, const std::string &name, uint64_t begin, uint64_t end,
               const at::Tensor &destination) {
  const c10::ScalarType stored = shards.dtype(name);
  const at::Tensor flat = destination.reshape({-1});
  if (flat.device().is_cpu() && flat.is_contiguous() && flat.scalar_type() == stored &&
      flat.data_ptr() == destination.data_ptr()) {
    shards.read(name, begin, end, flat.data_ptr());
    return;
  }
  constexpr uint64_t kSlice = uint64_t(1) << 24;
  at::Tensor buffer = at::empty({int64_t(std::min(kSlice, end - begin))}, at::TensorOptions().dtype(stored));
  for (uint64_t lo = begin; lo < end; lo += kSlice) {
    const uint64_t count = std::min(kSlice, end - lo);
    shards.read(name, lo, lo + count, buffer.data_ptr());
    flat.narrow(0, int64_t(lo - begin), int64_t(count)).copy_(buffer.narrow(0, 0, int64_t(count)));
  }
}

}  // namespace

ReshardReport load_resharded(CheckpointShards &shards, int rank, TrainingState &state,
                             const std::vector<std::string> &restart) {
  const uint64_t begin = state.shard_begin, end = state.shard_end, numel = end - begin;
  const std::string first = (shards.directory() / rank_file_name(0)).string();
  ZF_REQUIRE(shards.metadata().layout == state.layout_digest,
             "%s was written for another model layout; check [model] against the run that wrote it", first.c_str());
  ZF_REQUIRE(shards.per_element("master"), "%s: the tensor 'master' is not one value per element of each shard: the "
             "checkpoint is damaged", first.c_str());
  ReshardReport report;
  read_into(shards, "master", begin, end, state.master);
  for (auto &[name, tensor] : state.optimizer) {
    const std::string key = "optimizer." + name;
    const bool optional = listed(state.optional, name);
    if (listed(restart, name) || (optional && !shards.has(key))) {
      report.restarted.push_back(name);
      continue;
    }
    ZF_REQUIRE(shards.has(key), "%s has no optimizer state '%s' (another optimizer plugin?)", first.c_str(),
               name.c_str());
    if (shards.per_element(key) && uint64_t(tensor.numel()) == numel) {
      read_into(shards, key, begin, end, tensor);
    } else if (!shards.per_element(key) && shards.file(0).info(key).shape == tensor.sizes().vec()) {
      tensor.copy_(shards.load(0, key));  // one value for the whole run (the same in every rank's file)
    } else {
      ZF_REQUIRE(optional, "%s: optimizer state '%s' cannot be carried into this layout (it is neither one value per "
                 "element of the shard nor one for the whole run); resume on the layout that wrote it", first.c_str(),
                 name.c_str());
      report.restarted.push_back(name);
      continue;
    }
    report.carried.push_back(name);
  }
  for (const TensorPieces &pieces : state.optimizer_pieces) {
    const std::string key = "optimizer." + pieces.name;
    ZF_REQUIRE(shards.per_element(key), "%s has no optimizer state '%s' of one value per element (another optimizer "
               "plugin?)", first.c_str(), pieces.name.c_str());
    const c10::ScalarType stored = shards.dtype(key);
    at::Tensor buffer = at::empty({int64_t(std::min(pieces.piece_numel, pieces.numel))}, at::TensorOptions().dtype(stored));
    for (uint64_t lo = 0; lo < pieces.numel; lo += pieces.piece_numel) {
      const uint64_t count = std::min(pieces.piece_numel, pieces.numel - lo);
      shards.read(key, begin + lo, begin + lo + count, buffer.data_ptr());
      at::Tensor values = buffer.narrow(0, 0, int64_t(count)).to(pieces.dtype).contiguous();
      pieces.write(lo, count, values.data_ptr());
    }
    report.carried.push_back(pieces.name);
  }
  const int source = rank < shards.world_size() ? rank : 0;
  state.rng = shards.load(source, "rng");
  if (shards.file(source).has("device_rng")) state.device_rng = shards.load(source, "device_rng");
  state.step = shards.metadata().step;
  return report;
}

}  // namespace zf
