#include "checkpoint/checkpoint.hpp"

#include "checkpoint/checkpoint_metadata.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>

namespace zf {
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) { return format("step-%08lld", (long long)step); }
std::string rank_file(int rank) { return format("rank-%05d.safetensors", rank); }

void fsync_path(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

// The step of a checkpoint directory's name step-N (any number of digits), or -1.
int64_t step_of(const fs::path &checkpoint) {
  const std::string name = checkpoint.filename().string();
  if (name.size() <= 5 || name.rfind("step-", 0) != 0 || name.size() > 5 + 18) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  return std::stoll(name.substr(5));
}

bool ends_with(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Out of the store first (one rename), then deleted: a kill in the middle leaves a
// step-N.deleting directory, which the next save removes, never a half-deleted checkpoint that
// looks like a step.
void remove_checkpoint(const fs::path &checkpoint) {
  std::error_code ec;
  fs::path doomed = checkpoint;
  doomed += ".deleting";
  fs::rename(checkpoint, doomed, ec);
  fs::remove_all(ec ? checkpoint : doomed, ec);
}

// What an interrupted save or prune left behind (called after a save completed): step-N.deleting,
// step-N.tmp, and step-N directories without checkpoint.json (half-deleted by an older zfcore).
void remove_leftovers(const fs::path &directory) {
  std::error_code ec;
  std::vector<fs::path> doomed;
  for (const auto &entry : fs::directory_iterator(directory, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    const bool leftover = name.find('.') != std::string::npos ? ends_with(name, ".deleting") || ends_with(name, ".tmp")
                                                             : !fs::exists(entry.path() / "checkpoint.json");
    if (leftover) doomed.push_back(entry.path());
  }
  for (const fs::path &path : doomed) fs::remove_all(path, ec);
}

}  // namespace

std::vector<fs::path> checkpoints_in(const fs::path &directory) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return found;
  for (const auto &entry : fs::directory_iterator(directory, ec))
    if (entry.is_directory() && step_of(entry.path()) >= 0 && fs::exists(entry.path() / "checkpoint.json"))
      found.push_back(entry.path());
  // By the step number: step-100000000 is newer than step-99999999, though it sorts before it as text.
  std::sort(found.begin(), found.end(), [](const fs::path &a, const fs::path &b) { return step_of(a) < step_of(b); });
  return found;
}

std::string checkpoint_damage(const fs::path &checkpoint, int first_file, int stride) {
  try {
    ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
               checkpoint.c_str());
    const fs::path first = checkpoint / rank_file(0);
    const uint64_t world = read_checkpoint_metadata(SafetensorsFile::open(first).metadata(), first).world_size;
    for (uint64_t rank = uint64_t(first_file); rank < world; rank += uint64_t(stride)) {
      const fs::path file = checkpoint / rank_file(int(rank));
      SafetensorsFile stored = SafetensorsFile::open(file.string());  // the header's structure
      read_checkpoint_metadata(stored.metadata(), file.string());
      std::vector<std::string> damaged = stored.damaged_tensors();
      if (damaged.empty()) continue;
      std::string text = file.string() + ": " + damaged[0];
      if (damaged.size() > 1) text += format(" (and %zu more tensors)", damaged.size() - 1);
      return text;
    }
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

int64_t read_checkpoint_master(const fs::path &checkpoint, const std::string &layout_digest,
                               const std::function<void(uint64_t begin, const at::Tensor &values)> &take) {
  ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
             checkpoint.c_str());
  uint64_t world = 1, covered = 0;
  int64_t step = 0;
  for (uint64_t rank = 0; rank < world; ++rank) {
    fs::path file = checkpoint / rank_file(int(rank));
    ZF_REQUIRE(fs::exists(file), "%s has no file for rank %llu of %llu", checkpoint.c_str(),
               (unsigned long long)rank, (unsigned long long)world);
    SafetensorsFile stored = SafetensorsFile::open(file.string());
    CheckpointMetadata metadata = read_checkpoint_metadata(stored.metadata(), file.string());
    if (rank == 0) {
      world = metadata.world_size;
      step = metadata.step;
      ZF_REQUIRE(metadata.layout == layout_digest,
                 "%s was written for another model layout; check [model] against the run that wrote it",
                 checkpoint.c_str());
    }
    uint64_t begin = metadata.shard_begin, end = metadata.shard_end;
    if (end <= covered) continue;  // an earlier rank's file held it (zero0)
    ZF_REQUIRE(begin <= covered, "%s: the shards leave [%llu, %llu) out", checkpoint.c_str(),
               (unsigned long long)covered, (unsigned long long)begin);
    take(begin, stored.load("master"));
    covered = end;
  }
  return step;
}

CheckpointStore::CheckpointStore(fs::path directory, int64_t keep, Communicator &comm)
    : directory_(std::move(directory)), keep_(keep), comm_(comm) {}

fs::path CheckpointStore::save(const TrainingState &state, const std::string &info_json) {
  fs::path final_dir = directory_ / step_name(state.step);
  fs::path temp_dir = directory_ / (step_name(state.step) + ".tmp");
  if (comm_.rank() == 0) {
    std::error_code ec;
    fs::create_directories(directory_, ec);
    ZF_REQUIRE(!ec, "cannot create the checkpoint directory %s: %s", directory_.c_str(), ec.message().c_str());
    fs::remove_all(temp_dir, ec);
    fs::create_directories(temp_dir, ec);
    ZF_REQUIRE(!ec, "cannot create %s: %s", temp_dir.c_str(), ec.message().c_str());
  }
  comm_.barrier();

  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"master", state.master}, {"rng", state.rng}};
  if (state.device_rng.defined()) tensors.emplace_back("device_rng", state.device_rng);
  for (const auto &[name, tensor] : state.optimizer) tensors.emplace_back("optimizer." + name, tensor);
  CheckpointMetadata written{state.step, uint64_t(comm_.world_size()), state.shard_begin, state.shard_end,
                             state.layout_digest};
  std::map<std::string, std::string> metadata = checkpoint_metadata_fields(written, comm_.rank());
  std::vector<TensorPieces> pieces = state.optimizer_pieces;
  for (TensorPieces &p : pieces) p.name = "optimizer." + p.name;
  write_safetensors((temp_dir / rank_file(comm_.rank())).string(), tensors, metadata, pieces);
  comm_.barrier();

  if (comm_.rank() == 0) {
    fs::path info = temp_dir / "checkpoint.json";
    {
      std::ofstream out(info);
      out << info_json << "\n";
      ZF_REQUIRE(out.good(), "cannot write %s", info.c_str());
    }
    fsync_path(info);
    fsync_path(temp_dir);
    std::error_code ec;
    fs::remove_all(final_dir, ec);  // a checkpoint of the same step from an earlier run
    fs::rename(temp_dir, final_dir, ec);
    ZF_REQUIRE(!ec, "cannot move %s into place: %s", temp_dir.c_str(), ec.message().c_str());
    fsync_path(directory_);
    // The oldest go; never the one just written (a run resumed from an earlier step may find newer ones).
    std::vector<fs::path> all = checkpoints_in(directory_);
    for (size_t i = 0; i + size_t(keep_) < all.size(); ++i)
      if (step_of(all[i]) < state.step) remove_checkpoint(all[i]);
    remove_leftovers(directory_);
  }
  comm_.barrier();
  return final_dir;
}

std::string CheckpointStore::damage(const fs::path &checkpoint) const {
  return first_finding(comm_, checkpoint_damage(checkpoint, comm_.rank(), comm_.world_size()));
}

std::optional<fs::path> CheckpointStore::newest_whole(bool move_damaged_aside) const {
  std::vector<fs::path> all = checkpoints_in(directory_);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string found = damage(*it);
    if (found.empty()) return *it;
    if (comm_.rank() != 0) continue;
    std::string aside;
    if (move_damaged_aside) {
      fs::path damaged = *it;
      damaged += ".damaged";
      std::error_code ec;
      fs::remove_all(damaged, ec);
      fs::rename(*it, damaged, ec);
      if (!ec) aside = format(", moved to %s", damaged.c_str());
    }
    log_warn(format("checkpoint %s is damaged (%s)%s; trying the one before it", it->c_str(), found.c_str(),
                    aside.c_str()));
  }
  return std::nullopt;
}

void CheckpointStore::load(const fs::path &checkpoint, TrainingState &state) const {
  fs::path file = checkpoint / rank_file(comm_.rank());
  ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
             checkpoint.c_str());
  ZF_REQUIRE(fs::exists(file), "%s has no file for rank %d (it was written by fewer ranks?)", checkpoint.c_str(),
             comm_.rank());
  SafetensorsFile stored = SafetensorsFile::open(file.string());
  CheckpointMetadata metadata = read_checkpoint_metadata(stored.metadata(), file.string());
  ZF_REQUIRE(metadata.world_size == uint64_t(comm_.world_size()),
             "%s was written by %llu ranks; this run has %d. Resume with the same world size (or export the "
             "model and start a new run from it)",
             checkpoint.c_str(), (unsigned long long)metadata.world_size, comm_.world_size());
  ZF_REQUIRE(metadata.layout == state.layout_digest,
             "%s was written for another model layout; check [model] against the run that wrote it",
             checkpoint.c_str());
  ZF_REQUIRE(metadata.shard_begin == state.shard_begin && metadata.shard_end == state.shard_end,
             "%s holds the shard [%llu, %llu) for rank %d; this run owns [%llu, %llu) (another stage plugin?)",
             file.c_str(), (unsigned long long)metadata.shard_begin, (unsigned long long)metadata.shard_end,
             comm_.rank(), (unsigned long long)state.shard_begin, (unsigned long long)state.shard_end);
  stored.read_into("master", state.master);
  for (auto &[name, tensor] : state.optimizer) {
    const bool optional = std::find(state.optional.begin(), state.optional.end(), name) != state.optional.end();
    if (optional && !stored.has("optimizer." + name)) continue;
    ZF_REQUIRE(stored.has("optimizer." + name), "%s has no optimizer state '%s' (another optimizer plugin?)",
               file.c_str(), name.c_str());
    stored.read_into("optimizer." + name, tensor);
  }
  for (TensorPieces pieces : state.optimizer_pieces) {
    ZF_REQUIRE(stored.has("optimizer." + pieces.name),
               "%s has no optimizer state '%s' (another optimizer plugin?)", file.c_str(), pieces.name.c_str());
    pieces.name = "optimizer." + pieces.name;
    stored.read_pieces(pieces);
  }
  state.rng = stored.load("rng");
  if (stored.has("device_rng")) state.device_rng = stored.load("device_rng");
  state.step = metadata.step;
}

}  // namespace zf
