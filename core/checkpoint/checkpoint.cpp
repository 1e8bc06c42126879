#include "checkpoint/checkpoint.hpp"

#include "checkpoint/checkpoint_metadata.hpp"
#include "checkpoint/checksum.hpp"
#include "checkpoint/reshard.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/files_held.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace zf {
namespace fs = std::filesystem;

namespace {

std::string step_name(int64_t step) { return checkpoint_step_name(step); }
std::string rank_file(int rank) { return checkpoint_rank_file(rank); }

void fsync_path(const fs::path &path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::string checkpoint_record_problem(const fs::path &checkpoint) {
  const std::string path = (checkpoint / "checkpoint.json").string();
  std::string text;
  const std::string why = read_regular_file(path, 1 << 20, &text);
  if (!why.empty()) return path + ": cannot read: " + why;
  try {
    ZF_REQUIRE(parse_json(text, path).is_object(), "%s: not a JSON object", path.c_str());
  } catch (const Error &e) {
    return e.what();
  }
  std::string recorded;
  const fs::path first = checkpoint / rank_file(0);
  try {
    recorded = read_checkpoint_metadata(SafetensorsFile::open(first.string()).metadata(), first.string()).record_checksum;
  } catch (const Error &) {
    return "";  // the rank file's own check says what is wrong with it
  }
  const std::string actual = checksum_hex(text.data(), text.size());
  if (recorded.empty() || recorded == actual) return "";
  return format("%s does not match the checksum %s records (written %s, read %s): it was edited or damaged after "
                "the save, and what it records of the run (world size, batch, optimizer) cannot be trusted; restore "
                "it, or resume from another checkpoint (checkpoint.resume = DIR)", path.c_str(), first.c_str(),
                excerpt(recorded).c_str(), actual.c_str());
}

std::string checkpoint_damage(const fs::path &checkpoint, int first_file, int stride, bool tensors) {
  try {
    ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
               checkpoint.c_str());
    const fs::path first = checkpoint / rank_file(0);
    const CheckpointMetadata recorded = read_checkpoint_metadata(SafetensorsFile::open(first).metadata(), first);
    const uint64_t world = recorded.world_size;
    const int64_t named = checkpoint_step_of_name(checkpoint);
    ZF_REQUIRE(named < 0 || named == recorded.step, "%s holds step %lld, not the step of its name (copied or "
               "renamed?); resume it under its own name step-%08lld", first.c_str(), (long long)recorded.step,
               (long long)recorded.step);
    const std::string record = checkpoint_record_problem(checkpoint);
    if (!record.empty()) return record;
    for (uint64_t rank = uint64_t(first_file); rank < world; rank += uint64_t(stride)) {
      const fs::path file = checkpoint / rank_file(int(rank));
      SafetensorsFile stored = SafetensorsFile::open(file.string());  // the header's structure
      const CheckpointMetadata mine = read_checkpoint_metadata(stored.metadata(), file.string());
      // Every rank file is of one save: a file copied in from another step or run is not this checkpoint's.
      ZF_REQUIRE(mine.step == recorded.step && mine.world_size == world && mine.run_id == recorded.run_id &&
                     mine.record_checksum == recorded.record_checksum,
                 "%s holds step %lld of the run id %s, and %s step %lld of the run id %s: its rank files come from "
                 "different saves (one copied in from another checkpoint?); resume from another checkpoint",
                 file.c_str(), (long long)mine.step, mine.run_id.empty() ? "(none)" : mine.run_id.c_str(),
                 first.c_str(), (long long)recorded.step,
                 recorded.run_id.empty() ? "(none)" : recorded.run_id.c_str());
      if (!tensors) continue;
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
      const int64_t named = checkpoint_step_of_name(checkpoint);
      ZF_REQUIRE(named < 0 || named == step, "%s holds step %lld, not the step of its name (copied or renamed?)",
                 file.c_str(), (long long)step);
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
  const std::string owner = state.run_id.empty() ? "run" : state.run_id;  // the marker's text (a test's state has no id)
  const std::string final_name = step_name(state.step);
  const fs::path final_dir = directory_ / final_name;
  std::string temp_name = checkpoint_own_name(state.step, owner, ".tmp");
  std::optional<Directory> store;
  if (comm_.rank() == 0) {
    store.emplace(Directory::open(directory_.string(), /*create=*/true, "checkpoint.dir"));
    temp_name = clear_save_name(*store, state.step, owner);  // what an interrupted save of this run left
    // A checkpoint of this step from another run (run.name) is not ours to replace.
    std::error_code ec;
    const std::string holder = fs::exists(final_dir / "checkpoint.json", ec) ? checkpoint_run_name(final_dir) : "";
    ZF_REQUIRE(holder.empty() || holder == state.run_name,
               "%s already holds step %lld of the run \"%s\"; this run (run.name = \"%s\") does not replace it: "
               "give this run its own checkpoint.dir", directory_.c_str(), (long long)state.step, holder.c_str(),
               state.run_name.c_str());
    store->create_owned(temp_name, owner);
  }
  temp_name = first_finding(comm_, temp_name);  // rank 0's, on every rank
  const fs::path temp_dir = directory_ / temp_name;

  std::vector<std::pair<std::string, at::Tensor>> tensors = {{"master", state.master}, {"rng", state.rng}};
  if (state.device_rng.defined()) tensors.emplace_back("device_rng", state.device_rng);
  for (const auto &[name, tensor] : state.optimizer) tensors.emplace_back("optimizer." + name, tensor);
  const std::string record = info_json + "\n";  // checkpoint.json, covered by the metadata's checksum
  const CheckpointMetadata written{state.step,          uint64_t(comm_.world_size()),
                                   state.shard_begin,   state.shard_end,
                                   state.layout_digest, state.run_name,
                                   state.run_id,        state.config_digest,
                                   checksum_hex(record.data(), record.size())};
  std::map<std::string, std::string> metadata = checkpoint_metadata_fields(written, comm_.rank());
  std::vector<TensorPieces> pieces = state.optimizer_pieces;
  for (TensorPieces &p : pieces) p.name = "optimizer." + p.name;
  write_safetensors((temp_dir / rank_file(comm_.rank())).string(), tensors, metadata, pieces, /*block_checksums=*/true);
  comm_.barrier();

  if (comm_.rank() == 0) {
    store->subdirectory(temp_name, false).write_atomically("checkpoint.json", record);
    fsync_path(temp_dir);
    // The same step of this run's earlier life (resumed from an earlier checkpoint) is replaced, but
    // not a user's files put into it.
    if (store->owner_of(final_name) == owner) {
      const std::vector<std::string> foreign = checkpoint_foreign_entries(*store, final_name);
      ZF_REQUIRE(foreign.empty(), "%s holds %s, which zfcore did not write: move it away; this run writes its "
                 "checkpoint of step %lld there", final_dir.c_str(), foreign[0].c_str(), (long long)state.step);
    }
    if (!store->kind_of(final_name).empty()) {
      const std::string kept = remove_checkpoint(*store, final_name, owner);
      ZF_REQUIRE(kept.empty(), "%s is in the way of this run's checkpoint of step %lld and is %s: move it away or "
                 "give this run its own checkpoint.dir", final_dir.c_str(), (long long)state.step, kept.c_str());
    }
    const std::string moved = store->rename_entry(temp_name, final_name);
    ZF_REQUIRE(moved.empty(), "cannot move %s into place: %s", temp_dir.c_str(), moved.c_str());
    fsync_path(directory_);
    // The oldest of this run go (never another run's, never a link, never the one just written: a
    // run resumed from an earlier step may find newer ones).
    std::vector<fs::path> copies;
    std::vector<fs::path> all = checkpoints_of_run(directory_, state.run_name, nullptr, /*strict=*/false, &copies);
    // The checkpoints are listed by the directory's name: moved away mid-run (the run writes on into
    // it, runtime/files_held.hpp), it is not found there, and nothing of another directory is pruned.
    struct stat by_name {}, held {};
    if (::stat(directory_.c_str(), &by_name) != 0 || ::fstat(store->fd(), &held) != 0 ||
        by_name.st_dev != held.st_dev || by_name.st_ino != held.st_ino) {
      if (!warned_moved_)
        log_warn(format("%s was moved away or replaced while this run saves into it: the run goes on saving its "
                        "checkpoints there (now %s), but prunes none of them any more (checkpoint.keep = %lld); "
                        "remove the old ones by hand when the disk runs short", directory_.c_str(),
                        held_path_now(directory_.string()).c_str(), (long long)keep_));
      warned_moved_ = true;
      all.clear();
      copies.clear();
    }
    for (const fs::path &copy : copies)
      if (checkpoint_step_of_name(copy) < state.step && warned_copies_.insert(copy.string()).second)
        log_warn(format("pruning checkpoint.keep = %lld: %s is not this run's checkpoint of its step: %s; it is "
                        "left as it is (not pruned, not resumed from)", (long long)keep_, copy.c_str(),
                        checkpoint_copy_problem(copy).c_str()));
    for (size_t i = 0; i + size_t(keep_) < all.size(); ++i) {
      const std::string name = all[i].filename().string();
      if (checkpoint_step_of_name(all[i]) >= state.step || store->owner_of(name) != owner) continue;
      const std::string left = remove_checkpoint(*store, name, owner);
      if (!left.empty())
        log_warn(format("pruning checkpoint.keep = %lld: %s; its checkpoint files are removed, the directory is "
                        "left with the rest", (long long)keep_, left.c_str()));
    }
    remove_checkpoint_leftovers(*store, owner);
  }
  comm_.barrier();
  return final_dir;
}

std::string CheckpointStore::damage(const fs::path &checkpoint, bool tensors) const {
  return first_finding(comm_, checkpoint_damage(checkpoint, comm_.rank(), comm_.world_size(), tensors));
}

std::optional<fs::path> CheckpointStore::newest_whole(const std::string &run_name, const std::string &output_dir,
                                                      const std::string &latest, bool move_damaged_aside,
                                                      const std::function<std::string(const fs::path &)> &check) const {
  std::vector<fs::path> others, copies, elsewhere;
  std::vector<fs::path> all = checkpoints_of_output_dir(
      checkpoints_of_run(directory_, run_name, &others, /*strict=*/true, &copies), output_dir, &elsewhere);
  if (!elsewhere.empty() && comm_.rank() == 0)
    log_warn(format("%s holds %zu checkpoint(s) of another branch of run \"%s\" (another run.output_dir), e.g. %s "
                    "of %s: not resumed from by this run, which continues its own line", directory_.c_str(),
                    elsewhere.size(), run_name.c_str(), elsewhere.back().c_str(),
                    checkpoint_output_dir(elsewhere.back()).c_str()));
  if (comm_.rank() == 0)
    for (const fs::path &copy : copies)
      log_warn(format("%s is not the checkpoint of its name's step: %s; it is left as it is, not resumed from and "
                      "not pruned: resume it by hand under its own step's name, or move it out of %s",
                      copy.c_str(), checkpoint_copy_problem(copy).c_str(), directory_.c_str()));
  if (!others.empty() && comm_.rank() == 0)
    log_warn(format("%s holds %zu checkpoint(s) of other runs (another run.name), e.g. %s of \"%s\": not resumed "
                    "from by run.name = \"%s\"", directory_.c_str(), others.size(), others.back().c_str(),
                    checkpoint_run_name(others.back()).c_str(), run_name.c_str()));
  all = checkpoints_of_line(all, latest, comm_.rank() == 0);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    const std::string found = check ? check(*it) : damage(*it);
    if (found.empty()) return *it;
    if (comm_.rank() != 0) continue;
    std::string aside;
    if (move_damaged_aside) {  // renamed, never over an older one of that name (the filesystem rule)
      const std::string name = it->filename().string(), damaged = name + ".damaged";
      std::string why;
      try {
        const Directory store = Directory::open(directory_.string(), /*create=*/false, "checkpoint.dir");
        // Only a checkpoint zfcore wrote (its marker) is moved: a user's step-N is not zfcore's to rename.
        why = store.owner_of(name).empty() ? "no marker" : store.rename_entry(name, damaged);
      } catch (const Error &e) {
        why = e.what();
      }
      if (why == "no marker")
        aside = ", left where it is (it has no .zfcore-owner marker: zfcore did not write it, or an older zfcore did)";
      else if (why.empty())
        aside = format(", moved to %s", (directory_ / damaged).c_str());
    }
    log_warn(format("checkpoint %s is damaged (%s)%s; trying the one before it", it->c_str(), found.c_str(),
                    aside.c_str()));
  }
  return std::nullopt;
}

bool CheckpointStore::same_layout(const fs::path &checkpoint, const TrainingState &state) const {
  int64_t differs[1] = {1};
  try {
    const fs::path file = checkpoint / rank_file(comm_.rank());
    if (fs::exists(file)) {
      CheckpointMetadata metadata = read_checkpoint_metadata(SafetensorsFile::open(file.string()).metadata(), file);
      differs[0] = metadata.world_size != uint64_t(comm_.world_size()) || metadata.shard_begin != state.shard_begin ||
                   metadata.shard_end != state.shard_end;
    }
  } catch (const Error &) {  // load() says what is wrong with it
    differs[0] = 0;
  }
  comm_.all_reduce(zf_tensor_view{differs, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
  return differs[0] == 0;
}

ReshardReport CheckpointStore::load_resharded(const fs::path &checkpoint, TrainingState &state,
                                              const std::vector<std::string> &restart, uint64_t *bytes_read) const {
  CheckpointShards shards = CheckpointShards::open(checkpoint);
  ReshardReport report = zf::load_resharded(shards, comm_.rank(), state, restart);
  if (bytes_read) *bytes_read = shards.bytes_read();
  return report;
}

void CheckpointStore::load(const fs::path &checkpoint, TrainingState &state) const {
  fs::path file = checkpoint / rank_file(comm_.rank());
  ZF_REQUIRE(fs::exists(checkpoint / "checkpoint.json"), "%s is not a complete checkpoint (no checkpoint.json)",
             checkpoint.c_str());
  ZF_REQUIRE(fs::exists(file), "%s has no file for rank %d", checkpoint.c_str(), comm_.rank());
  SafetensorsFile stored = SafetensorsFile::open(file.string());
  CheckpointMetadata metadata = read_checkpoint_metadata(stored.metadata(), file.string());
  ZF_REQUIRE(metadata.layout == state.layout_digest,
             "%s was written for another model layout; check [model] against the run that wrote it",
             checkpoint.c_str());
  ZF_REQUIRE(metadata.world_size == uint64_t(comm_.world_size()) && metadata.shard_begin == state.shard_begin &&
                 metadata.shard_end == state.shard_end,
             "%s holds the shard [%llu, %llu) of %llu ranks; this rank owns [%llu, %llu) of %d: load it with "
             "load_resharded", file.c_str(), (unsigned long long)metadata.shard_begin,
             (unsigned long long)metadata.shard_end, (unsigned long long)metadata.world_size,
             (unsigned long long)state.shard_begin, (unsigned long long)state.shard_end, comm_.world_size());
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
