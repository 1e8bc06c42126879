// checkpoint_directory.hpp: a checkpoint directory (checkpoint.dir) and its entries: which are
// checkpoints (step-N with a checkpoint.json) and of which run, and what a save may remove there,
// through the filesystem rule (runtime/files.hpp). A checkpoint directory is created by its run with
// an ownership marker naming the run id, under a name that carries the id too (step-N.RUNID.tmp,
// renamed step-N when whole; step-N.RUNID.deleting while pruned). A save removes only directories
// whose marker names its run, and in them only the files a save writes (checkpoint.json, the rank
// files): never an entry matched by a pattern alone, never another run's checkpoint, never one of an
// older zfcore (no marker), never a user's file put into a checkpoint.
#pragma once

#include "runtime/files.hpp"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace zf {

// The names a save gives: step-NNNNNNNN, rank-NNNNN.safetensors, and step-N.OWNER<suffix> for its
// own temporary (".tmp") and doomed (".deleting") directories.
std::string checkpoint_step_name(int64_t step);
std::string checkpoint_rank_file(int rank);
std::string checkpoint_own_name(int64_t step, const std::string &owner, const char *suffix);
// N of a directory named step-N, or -1.
int64_t checkpoint_step_of_name(const std::filesystem::path &checkpoint);

// The complete checkpoints (step-N with a checkpoint.json) in `directory`, oldest first by step. A
// step-N entry that cannot be followed (a link to itself, a loop) is an error naming it (strict),
// or skipped with a warning.
std::vector<std::filesystem::path> checkpoints_in(const std::filesystem::path &directory, bool strict = true);
// ... of the run named `run_name` (and those of format 1, which name no run); the others' go to
// `others`, and those that are not the step of their name (checkpoint_copy_problem) to `copies`.
std::vector<std::filesystem::path> checkpoints_of_run(const std::filesystem::path &directory, const std::string &run_name,
                                                      std::vector<std::filesystem::path> *others, bool strict = true,
                                                      std::vector<std::filesystem::path> *copies = nullptr);
// Of `mine` (one run.name's checkpoints), those its run in `output_dir` wrote (checkpoint.json records
// the output directory; older checkpoints record none and count as its own): two branches of one
// run.name sharing a checkpoint.dir each resume and evaluate their own line, never the other's
// newest. When it has none yet (a branch's first start), all of `mine`: it starts from their newest.
// The other branches' go to `elsewhere`.
std::vector<std::filesystem::path> checkpoints_of_output_dir(const std::vector<std::filesystem::path> &mine,
                                                             const std::string &output_dir,
                                                             std::vector<std::filesystem::path> *elsewhere);
// Of `mine` (oldest first), those up to `latest` (the checkpoint the run saved last, recorded in its
// output directory), when it is one of them: the later ones are a line the run left when it went
// back to an earlier checkpoint (checkpoint.resume = DIR). They are named in a warning when `say`,
// and stay where they are (a save of the same step replaces them, as the run's own).
std::vector<std::filesystem::path> checkpoints_of_line(const std::vector<std::filesystem::path> &mine,
                                                       const std::string &latest, bool say);
// The output directory recorded in `checkpoint`'s checkpoint.json ("" when none, or the record is damaged).
std::string checkpoint_output_dir(const std::filesystem::path &checkpoint);
// "" when `checkpoint` is what its name says: its rank-0 metadata (under its checksum) and its
// checkpoint.json record the step of its name, and the run id `run_id` when one is given; else what
// it records instead. A user's copy of step-00000004 under step-00000003 (cp -a copies the
// ownership marker too) is theirs: zfcore neither resumes from it nor prunes it. One whose metadata
// cannot be read passes here (the damage check says what is wrong) unless `unreadable_fails`.
std::string checkpoint_copy_problem(const std::filesystem::path &checkpoint, const std::string &run_id = "",
                                    bool unreadable_fails = false);
// The run name recorded in a checkpoint's rank-0 file ("" for checkpoints of format 1 or unreadable
// ones: the damage check says what is wrong with those).
std::string checkpoint_run_name(const std::filesystem::path &checkpoint);

// The entries of checkpoint `name` in `store` that no save wrote (a user's notes, a link, a directory).
std::vector<std::string> checkpoint_foreign_entries(const Directory &store, const std::string &name);
// Removes this run's checkpoint `name` (its marker names `run_id`, and its content records that run
// id and the step of its name: checkpoint_copy_problem): out of the store first (one rename to a name of this run),
// then deleted, so that a kill in the middle leaves step-N.RUNID.deleting, which this run's next save
// removes, never a half-deleted checkpoint that looks like a step. One holding a user's files loses
// only what its save wrote (checkpoint.json first: it is no checkpoint any more) and stays with
// them. "" or why it was left.
std::string remove_checkpoint(const Directory &store, const std::string &name, const std::string &run_id);
// Removes what an interrupted save or prune of this run left behind: step-N.RUNID.tmp and
// step-N.RUNID.deleting carrying its marker. Anything else (a user's step-notes/, an export under
// step-5-hf/, another run's leftovers) is not this run's to remove.
void remove_checkpoint_leftovers(const Directory &store, const std::string &run_id);
// The temporary name of this run's save of `step` (step-N.RUNID.tmp), free: what an interrupted save
// of this run left there is removed when it carries the run's marker or is empty, else stepped
// around (step-N.K.RUNID.tmp); the log says which.
std::string clear_save_name(const Directory &store, int64_t step, const std::string &run_id);

// "" when `export_dir` (checkpoint.export_hf, zfcore export's OUT_DIR) lies outside `checkpoints` (a
// checkpoint.dir, or one checkpoint), else why not ("is inside the checkpoint directory ..."): runs
// write, replace and prune what is in there, and an export there would go with it.
std::string export_dir_problem(const std::filesystem::path &export_dir, const std::filesystem::path &checkpoints);
// Before step 1: "" when each step-N entry of `store` that this run's saves of the steps (after, last]
// would replace (every `every` steps, and `last` when `final`) is this run's own checkpoint, else
// which one is in the way, why, and what to do.
std::string saves_in_the_way(const Directory &store, const std::string &run_id, int64_t after, int64_t last,
                             int64_t every, bool final);
// The record an export keeps in its directory: while it writes, the token of the process writing
// (files_interrupted.hpp: the temporaries of an export killed outright go with the next export);
// once its files are in place, their names. A directory holding it is zfcore's export, which a later
// export replaces.
constexpr const char *kExportRecord = ".zfcore-export";
// "" when an export may write into `export_dir`: it is missing, empty, or holds an export's record;
// else what it holds that no export wrote, and what to do ("holds config.json, which no zfcore export
// wrote ..."). Checked before step 1 and again as the export writes: a user's config.json or
// model.safetensors is never replaced.
std::string export_ownership_problem(const std::filesystem::path &export_dir);
// Throws zf::Error "DIR holds ..." unless export_ownership_problem finds none.
void require_export_ownership(const std::string &export_dir);
// "" when `export_dir` is no checkpoint of any run and lies in none, nor in a directory of checkpoints
// (it, or a directory above it, holds step-N checkpoints); else export_dir_problem's why.
std::string export_into_checkpoints_problem(const std::filesystem::path &export_dir);
// The checkpoint directory that `checkpoint` lies in (a step-N directory is saved into one), or the
// checkpoint itself when its name is another: what an export must stay out of.
std::filesystem::path store_of(const std::filesystem::path &checkpoint);

}  // namespace zf
