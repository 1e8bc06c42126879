// checkpoint_choice.cpp: which checkpoint a run, zfcore eval or zfcore export reads
// (checkpoint.resume: "auto", a path, "never"), and the record of the checkpoint a run saved last
// (training_checkpoint.hpp declares them).
#include "engine/training_checkpoint.hpp"

#include "runtime/error.hpp"
#include "runtime/files_held.hpp"
#include "runtime/input.hpp"

namespace zf {

namespace {
constexpr const char *kLatestRecord = ".zfcore-latest";  // in the output directory: the run's last save
}  // namespace

void record_latest_saved(const std::string &output_dir, const std::string &checkpoint) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::weakly_canonical(std::filesystem::absolute(checkpoint, ec), ec);
  try {
    Directory::open(output_dir, true, "run.output_dir").write_atomically(kLatestRecord, (ec ? checkpoint : path.string()) + "\n");
  } catch (const Error &e) {  // a full disk: the checkpoint is whole, its record is not
    const std::string now = held_path_now(output_dir);  // "... was removed during the run", when it was
    throw Error(format("the checkpoint %s is saved whole, but recording it as the run's newest in %s failed: %s. Free "
                       "space there (or restore the directory), then continue with --set checkpoint.resume=%s (the "
                       "record may still name an older checkpoint)", checkpoint.c_str(), now.c_str(), e.what(),
                       checkpoint.c_str()));
  }
}

std::string latest_saved(const std::string &output_dir, Communicator &comm) {
  std::string text;
  if (comm.rank() == 0) {
    const std::string path = (std::filesystem::path(output_dir) / kLatestRecord).string();
    std::error_code ec;
    if (std::filesystem::exists(std::filesystem::symlink_status(path, ec)) && !read_regular_file(path, 4096, &text).empty())
      text.clear();  // not a file zfcore wrote: the newest checkpoint by step, as before
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  }
  return first_finding(comm, text);
}

void require_one_checkpoint(const std::string &dir, const std::string &what, bool resume) {
  const std::filesystem::path path(dir);
  std::error_code ec;
  auto has = [&](const char *name) { return std::filesystem::exists(std::filesystem::symlink_status(path / name, ec)); };
  if (has("checkpoint.json")) return;
  const std::string shown = excerpt(dir);
  ZF_REQUIRE(!has("config.json"), "%s is a Hugging Face model directory, not a checkpoint: %s", what.c_str(),
             resume ? format("start from its weights with model.init_from = \"%s\" (and checkpoint.resume = "
                             "\"never\")", shown.c_str()).c_str()
                    : "give a training checkpoint (a step-N directory with a checkpoint.json)");
  // A run's output directory or a directory of checkpoints: its newest checkpoint is named, and
  // never a checkpoints/ directory that is not there (a run with its own checkpoint.dir).
  const bool run_directory = has("checkpoints") || has("summary.json") || has("steps.jsonl");
  if (run_directory && !has("checkpoints"))
    throw Error(format("%s is a run's output directory, not a checkpoint, and holds no checkpoints/ (its run saved "
                       "them in the checkpoint.dir it set): name one checkpoint there, a step-N directory",
                       what.c_str()));
  const std::filesystem::path store = run_directory ? path / "checkpoints" : path;
  const std::vector<std::filesystem::path> held = checkpoints_in(store, false);
  if (!run_directory && held.empty()) return;  // the checks of the checkpoint itself say what is missing
  const std::string newest = held.empty() ? "(none yet)" : excerpt(held.back().string());
  throw Error(format("%s is %s: name one of its checkpoints, e.g. the newest, %s%s", what.c_str(),
                     run_directory ? "a run's output directory, not a checkpoint"
                                   : "a directory of checkpoints, not one checkpoint",
                     newest.c_str(),
                     resume ? format(" (or resume the newest with checkpoint.dir = \"%s\" and checkpoint.resume = "
                                     "\"auto\")", excerpt(store.string()).c_str()).c_str()
                            : ""));
}

void require_undamaged(const RunConfig &config, const CheckpointStore &store, const std::filesystem::path &checkpoint,
                       bool tensors) {
  const std::string damage = store.damage(checkpoint, tensors);
  ZF_REQUIRE(damage.empty(), "%s: checkpoint.resume = \"%s\" is damaged: %s; choose another checkpoint",
             config.where("checkpoint", "resume").str().c_str(), excerpt(checkpoint.string()).c_str(), damage.c_str());
}

std::optional<std::filesystem::path> checkpoint_to_resume(
    const RunConfig &config, const std::string &output_dir, Communicator &comm, bool move_damaged_aside,
    bool check_tensors, const std::function<std::string(const std::filesystem::path &)> &check) {
  std::string resume = config.string("checkpoint", "resume");
  if (resume == "never") return std::nullopt;
  const std::string dir = checkpoint_dir(config, output_dir);
  CheckpointStore store(dir, 1, comm);
  if (resume == "auto") {
    const std::string run_name = config.string("run", "name");
    const bool any = !checkpoints_of_run(dir, run_name, nullptr).empty();
    std::optional<std::filesystem::path> newest =
        store.newest_whole(run_name, output_dir, latest_saved(output_dir, comm), move_damaged_aside, check);
    ZF_REQUIRE(newest || !any,
               "every checkpoint in %s is damaged (the warnings above name them); resume one by hand "
               "(checkpoint.resume = DIR) or start afresh (checkpoint.resume = \"never\")",
               dir.c_str());
    return newest;
  }
  const std::string where = config.where("checkpoint", "resume").str();
  std::error_code ec;
  ZF_REQUIRE(std::filesystem::is_directory(resume, ec), "%s: checkpoint.resume = \"%s\": no such checkpoint directory",
             where.c_str(), excerpt(resume).c_str());
  require_one_checkpoint(resume, format("%s: checkpoint.resume = \"%s\"", where.c_str(), excerpt(resume).c_str()), true);
  require_undamaged(config, store, resume, check_tensors);
  return std::filesystem::path(resume);
}

}  // namespace zf
