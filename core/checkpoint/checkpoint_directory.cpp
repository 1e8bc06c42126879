// checkpoint_directory.cpp: which entries of a checkpoint directory are checkpoints and whose, and
// what a save may remove there (checkpoint_directory.hpp).
#include "checkpoint/checkpoint_directory.hpp"

#include "checkpoint/checkpoint_metadata.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

namespace zf {
namespace fs = std::filesystem;

namespace {

bool ends_with(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// What a save writes into a checkpoint's directory (besides the ownership marker): checkpoint.json
// and the rank files. A user's file put there is not zfcore's to remove.
bool written_by_save(const std::string &entry) {
  if (entry == "checkpoint.json") return true;
  const std::string prefix = "rank-", suffix = ".safetensors";
  return entry.size() == prefix.size() + 5 + suffix.size() && entry.rfind(prefix, 0) == 0 && ends_with(entry, suffix) &&
         entry.find_first_not_of("0123456789", prefix.size()) == prefix.size() + 5;
}

}  // namespace

std::string checkpoint_step_name(int64_t step) { return format("step-%08lld", (long long)step); }
std::string checkpoint_rank_file(int rank) { return format("rank-%05d.safetensors", rank); }

std::string checkpoint_own_name(int64_t step, const std::string &owner, const char *suffix) {
  return checkpoint_step_name(step) + "." + owner + suffix;
}

std::vector<std::string> checkpoint_foreign_entries(const Directory &store, const std::string &name) {
  std::vector<std::string> foreign;
  const std::vector<std::string> entries = store.entries_of(name);
  if (entries.empty()) return foreign;
  const Directory inside = store.subdirectory(name, false);
  for (const std::string &entry : entries)
    if (!written_by_save(entry) || inside.kind_of(entry) != "file") foreign.push_back(entry);
  return foreign;
}

std::string remove_checkpoint(const Directory &store, const std::string &name, const std::string &run_id) {
  if (store.owner_of(name) != run_id) return "not this run's (no marker of run " + run_id + ")";
  // The marker travels with a copy (cp -a): what the checkpoint records decides, read before anything goes.
  const std::string copy = checkpoint_copy_problem(fs::path(store.path()) / name, run_id, /*unreadable_fails=*/true);
  if (!copy.empty()) return "not this run's checkpoint of step " + std::to_string(checkpoint_step_of_name(name)) + ": " + copy;
  if (!checkpoint_foreign_entries(store, name).empty()) {
    std::vector<std::string> ours = {"checkpoint.json"};
    for (const std::string &entry : store.entries_of(name))
      if (written_by_save(entry) && entry != "checkpoint.json") ours.push_back(entry);
    return store.remove_owned_files(name, run_id, ours);
  }
  const std::string doomed = checkpoint_own_name(checkpoint_step_of_name(name), run_id, ".deleting");
  const std::string why = store.rename_entry(name, doomed);
  return why.empty() ? store.remove_owned(doomed, run_id) : why;
}

void remove_checkpoint_leftovers(const Directory &store, const std::string &run_id) {
  if (run_id.empty()) return;
  std::error_code ec;
  std::vector<std::string> doomed;
  for (const auto &entry : fs::directory_iterator(store.path(), ec)) {
    const std::string name = entry.path().filename().string();
    if (ends_with(name, "." + run_id + ".tmp") || ends_with(name, "." + run_id + ".deleting")) doomed.push_back(name);
  }
  for (const std::string &name : doomed)
    if (!store.owner_of(name).empty() && store.remove_owned(name, run_id).empty())
      log_info(format("removed %s, left by an interrupted %s of this run", store.path_of(name).c_str(),
                      ends_with(name, ".tmp") ? "save" : "removal of an old checkpoint"));
}

std::string clear_save_name(const Directory &store, int64_t step, const std::string &run_id) {
  std::string name = checkpoint_own_name(step, run_id, ".tmp");
  for (int other = 2; other < 100 && !store.kind_of(name).empty(); ++other) {
    // The name carries this run's id: a save of this run made it and was cut short.
    if (!store.owner_of(name).empty()) {
      const std::string why = store.remove_owned(name, run_id);
      if (why.empty()) {
        log_info(format("removed %s, left by an interrupted save of this run", store.path_of(name).c_str()));
        return name;
      }
    } else if (store.kind_of(name) == "dir" && ::unlinkat(store.fd(), name.c_str(), AT_REMOVEDIR) == 0) {
      // Without its marker (cut short between creating it and marking it): empty, nothing is lost.
      log_info(format("removed the empty %s, left by an interrupted save of this run", store.path_of(name).c_str()));
      return name;
    }
    const std::string next = checkpoint_step_name(step) + "." + std::to_string(other) + "." + run_id + ".tmp";
    log_warn(format("%s, left by an interrupted save of this run, has no %s marker and is not empty: zfcore "
                    "cannot prove what is in it is its own and leaves it (remove it when you do not need it); this "
                    "save writes %s instead", store.path_of(name).c_str(), kOwnerMarker, store.path_of(next).c_str()));
    name = next;
  }
  return name;
}

std::string checkpoint_run_name(const fs::path &checkpoint) {
  try {
    const fs::path first = checkpoint / checkpoint_rank_file(0);
    return read_checkpoint_metadata(SafetensorsFile::open(first.string()).metadata(), first.string()).run_name;
  } catch (const Error &) {
    return "";
  }
}

std::string checkpoint_copy_problem(const fs::path &checkpoint, const std::string &run_id, bool unreadable_fails) {
  const int64_t named = checkpoint_step_of_name(checkpoint);
  const fs::path first = checkpoint / checkpoint_rank_file(0);
  CheckpointMetadata recorded;
  try {
    recorded = read_checkpoint_metadata(SafetensorsFile::open(first.string()).metadata(), first.string());
  } catch (const Error &e) {
    return unreadable_fails ? format("its metadata cannot be read (%s), so what it holds is unknown", e.what()) : "";
  }
  // A save's own checkpoint.json records the step too (a test's record may not).
  int64_t listed = recorded.step;
  std::string text;
  if (read_regular_file((checkpoint / "checkpoint.json").string(), 1 << 20, &text).empty()) {
    try {
      const nlohmann::json info = parse_json(text, (checkpoint / "checkpoint.json").string());
      if (info.is_object() && info.contains("step") && info["step"].is_number_integer()) listed = info["step"].get<int64_t>();
    } catch (const Error &) {  // the record's own check says what is wrong with it
    }
  }
  const std::string owner = recorded.run_id.empty() ? "run" : recorded.run_id;  // a test's state has no id
  if (named >= 0 && recorded.step == named && listed == named && (run_id.empty() || owner == run_id)) return "";
  std::string held = format("it holds step %lld", (long long)recorded.step);
  if (listed != recorded.step) held += format(" (its checkpoint.json says %lld)", (long long)listed);
  if (!run_id.empty() && owner != run_id) held += " of the run id " + excerpt(owner) + ", not " + run_id;
  return held + " (a copy or a rename?)";
}

std::string checkpoint_output_dir(const fs::path &checkpoint) {
  const std::string path = (checkpoint / "checkpoint.json").string();
  std::string text;
  if (!read_regular_file(path, 1 << 20, &text).empty()) return "";
  try {
    const nlohmann::json info = parse_json(text, path);
    if (info.is_object() && info.contains("output_dir") && info["output_dir"].is_string())
      return info["output_dir"].get<std::string>();
  } catch (const Error &) {  // the record's own check says what is wrong with it
  }
  return "";
}

std::vector<fs::path> checkpoints_of_output_dir(const std::vector<fs::path> &mine, const std::string &output_dir,
                                                std::vector<fs::path> *elsewhere) {
  std::error_code ec;
  const std::string here = as_json_text(fs::weakly_canonical(fs::absolute(output_dir, ec), ec).string());  // as recorded
  std::vector<fs::path> own, other;
  for (const fs::path &checkpoint : mine) {
    const std::string recorded = checkpoint_output_dir(checkpoint);
    (recorded.empty() || recorded == here ? own : other).push_back(checkpoint);
  }
  if (own.empty()) return mine;
  if (elsewhere) *elsewhere = other;
  return own;
}

std::vector<fs::path> checkpoints_of_line(const std::vector<fs::path> &mine, const std::string &latest, bool say) {
  if (latest.empty()) return mine;
  auto run_id_of = [](const fs::path &checkpoint) {
    try {
      const fs::path first = checkpoint / checkpoint_rank_file(0);
      return read_checkpoint_metadata(SafetensorsFile::open(first.string()).metadata(), first.string()).run_id;
    } catch (const Error &) {
      return std::string();  // the damage check says what is wrong with it
    }
  };
  std::error_code ec;
  const fs::path head = fs::weakly_canonical(latest, ec);
  for (size_t i = 0; i < mine.size() && !ec; ++i) {
    std::error_code each;
    if (fs::weakly_canonical(mine[i], each) != head || each) continue;
    // After the head: the run's own (its run id) are the line it left; anything else is judged as before.
    const std::string id = run_id_of(mine[i]);
    std::vector<fs::path> line(mine.begin(), mine.begin() + long(i) + 1), left;
    for (size_t j = i + 1; j < mine.size(); ++j) (!id.empty() && run_id_of(mine[j]) == id ? left : line).push_back(mine[j]);
    if (say && !left.empty()) {
      const std::string later = left.size() == 1 ? left[0].string()
                                                 : left[0].string() + " to " + left.back().filename().string();
      log_warn(format("%s: newer than this run's last recorded save, %s: left by a line it abandoned when it went "
                      "back to an earlier checkpoint (checkpoint.resume = DIR), or saved by a run killed before it "
                      "recorded the save. The run continues from %s, not from there. Kept as they are: resume one by "
                      "hand (checkpoint.resume = DIR), or remove them when they are not needed", later.c_str(),
                      mine[i].c_str(), mine[i].c_str()));
    }
    return line;
  }
  return mine;
}

int64_t checkpoint_step_of_name(const fs::path &checkpoint) {
  const std::string name = checkpoint.filename().string();
  if (name.size() <= 5 || name.rfind("step-", 0) != 0 || name.size() > 5 + 18) return -1;
  if (name.find_first_not_of("0123456789", 5) != std::string::npos) return -1;
  // Only the name a save gives (step-%08lld): a user's copy such as step-4 of step-00000004 is
  // theirs, never resumed from by resume = "auto" nor pruned.
  const long long step = std::stoll(name.substr(5));
  return name == format("step-%08lld", step) ? step : -1;
}

std::string export_dir_problem(const fs::path &export_dir, const fs::path &checkpoints) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(export_dir, ec), ec);
  const fs::path store = fs::weakly_canonical(fs::absolute(checkpoints, ec), ec);
  if (ec || store.empty()) return "";
  if (std::mismatch(store.begin(), store.end(), out.begin(), out.end()).first != store.end()) return "";
  const bool one = fs::exists(store / "checkpoint.json", ec);
  return format("is %s%s %s, %s: export into a directory of its own, outside it (e.g. %s)",
                out == store ? "" : "inside ", one ? "the checkpoint" : "the checkpoint directory", store.c_str(),
                one ? "which runs replace and prune" : "whose checkpoints runs write, replace and prune",
                (store.parent_path() / (store.filename().string() + "-hf")).c_str());
}

std::string saves_in_the_way(const Directory &store, const std::string &run_id, int64_t after, int64_t last,
                             int64_t every, bool final) {
  std::error_code ec;
  for (const auto &entry : fs::directory_iterator(store.path(), ec)) {
    const std::string name = entry.path().filename().string();
    const int64_t step = checkpoint_step_of_name(name);
    if (step <= after || step > last || !((every > 0 && step % every == 0) || (final && step == last))) continue;
    if (name != checkpoint_step_name(step)) continue;  // step-5.damaged, step-5-notes: not where a save goes
    // What save() would meet there (checkpoint.cpp): only this run's own checkpoint is replaced.
    std::string why = store.kind_of(name) != "dir"            ? "not a directory"
                      : store.owner_of(name) != run_id         ? "not this run's checkpoint (no marker of this run)"
                      : checkpoint_copy_problem(entry.path(), run_id, /*unreadable_fails=*/true);
    const std::vector<std::string> foreign = why.empty() ? checkpoint_foreign_entries(store, name) : std::vector<std::string>{};
    if (!foreign.empty())  // as save() says it
      return format("%s holds %s, which zfcore did not write: move it away; this run writes its checkpoint of step "
                    "%lld there (found before step 1)", store.path_of(name).c_str(), foreign[0].c_str(), (long long)step);
    if (!why.empty())
      return format("%s is in the way of this run's checkpoint of step %lld (%s): the run would train up to it and "
                    "then stop; move it away, or give this run its own checkpoint.dir", store.path_of(name).c_str(),
                    (long long)step, why.c_str());
  }
  return "";
}

std::string export_ownership_problem(const fs::path &export_dir) {
  std::error_code ec;
  if (!fs::is_directory(export_dir, ec) || fs::is_regular_file(fs::symlink_status(export_dir / kExportRecord, ec)))
    return "";  // created by the export, or zfcore's export (a file there is refused elsewhere)
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(export_dir, ec)) found.push_back(entry.path().filename().string());
  if (found.empty()) return "";
  std::sort(found.begin(), found.end());
  std::string names = found[0];
  if (found.size() > 1) names += found.size() == 2 ? " and " + found[1] : format(" and %zu more", found.size() - 1);
  return format("holds %s, which no zfcore export wrote (an export leaves a %s record beside its files): the export "
                "writes model.safetensors, config.json and the tokenizer's files there, replacing any of those "
                "names; export into a new or empty directory, or move %s out of it (a directory an older zfcore "
                "exported to has no record either: remove its files, or export elsewhere)",
                names.c_str(), kExportRecord, found.size() == 1 ? found[0].c_str() : "them");
}

void require_export_ownership(const std::string &export_dir) {
  const std::string foreign = export_ownership_problem(export_dir);
  ZF_REQUIRE(foreign.empty(), "%s %s", export_dir.c_str(), foreign.c_str());
}

std::string export_into_checkpoints_problem(const fs::path &export_dir) {
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(export_dir, ec), ec);
  if (ec) return "";
  // The directory itself and each above it: a checkpoint (step-N holding a checkpoint's files) or a
  // directory of checkpoints, of any run.
  for (fs::path at = out; !at.empty(); at = at.parent_path()) {
    const bool checkpoint = checkpoint_step_of_name(at) >= 0 && (fs::exists(at / "checkpoint.json", ec) ||
                                                                  fs::exists(at / "rank-00000.safetensors", ec));
    if (checkpoint || !checkpoints_in(at, /*strict=*/false).empty()) return export_dir_problem(out, at);
    if (at == at.parent_path()) break;
  }
  return "";
}

fs::path store_of(const fs::path &checkpoint) {
  const fs::path whole = checkpoint.filename().empty() ? checkpoint.parent_path() : checkpoint;  // "step-5/"
  return checkpoint_step_of_name(whole) >= 0 && whole.has_parent_path() ? whole.parent_path() : whole;
}

std::vector<fs::path> checkpoints_in(const fs::path &directory, bool strict) {
  std::vector<fs::path> found;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) return found;
  for (const auto &entry : fs::directory_iterator(directory, ec)) {
    if (checkpoint_step_of_name(entry.path()) < 0) continue;
    std::error_code link_ec;
    const bool is_directory = fs::is_directory(entry.path(), link_ec);  // through a link
    if (link_ec) {  // a link to itself, a loop, a dangling link
      const std::string why = format("%s cannot be read as a checkpoint: %s; remove it or make it a checkpoint "
                                     "directory", entry.path().c_str(), link_ec.message().c_str());
      if (strict) throw Error(why);
      log_warn(why + " (skipped)");
      continue;
    }
    if (is_directory && fs::exists(entry.path() / "checkpoint.json", link_ec)) found.push_back(entry.path());
  }
  // By the step number: step-100000000 is newer than step-99999999, though it sorts before it as text.
  std::sort(found.begin(), found.end(), [](const fs::path &a, const fs::path &b) {
    return checkpoint_step_of_name(a) < checkpoint_step_of_name(b);
  });
  return found;
}

std::vector<fs::path> checkpoints_of_run(const fs::path &directory, const std::string &run_name,
                                         std::vector<fs::path> *others, bool strict, std::vector<fs::path> *copies) {
  std::vector<fs::path> mine;
  for (const fs::path &checkpoint : checkpoints_in(directory, strict)) {
    if (!checkpoint_copy_problem(checkpoint).empty()) {  // not the step of its name: the user's
      if (copies) copies->push_back(checkpoint);
      continue;
    }
    const std::string name = checkpoint_run_name(checkpoint);
    if (name.empty() || name == run_name) mine.push_back(checkpoint);
    else if (others) others->push_back(checkpoint);
  }
  return mine;
}

}  // namespace zf
