// run_lock.hpp: one run per directory. A run holds a lock on its output directory (and on
// checkpoint.dir when that is elsewhere) from start-up to exit, so that a second run given the same
// directory stops at once, naming the process that holds it, instead of resuming from the first
// run's checkpoints and interleaving its files. The lock is the kernel's (flock on the directory's
// own descriptor, held open for the run's life): it goes with the process, however the process ends,
// and no file removal breaks it. .zfcore.lock names the holder while it runs; one still named when
// the lock is free was left by a run that was killed, and is taken over with a word in the log.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

namespace zf {

class Communicator;

class RunLock {
 public:
  // Creates `directory` if needed and locks it; throws zf::Error naming `what` (e.g. "run.output_dir =
  // \"runs/x\"") and the pid and host of the run that holds it. Without `lock` (the other ranks of
  // the run, once rank 0 holds the lock) it only holds the directory open, so that their files too
  // go into the directory the run started with (runtime/files_held.hpp).
  RunLock(const std::filesystem::path &directory, const std::string &what, bool lock = true);
  ~RunLock();
  RunLock(const RunLock &) = delete;
  RunLock &operator=(const RunLock &) = delete;

 private:
  int fd_ = -1;      // .zfcore.lock
  int dir_fd_ = -1;  // the directory
};

// One run per directory: the locks on run.output_dir, and on checkpoint.dir where that is another
// directory (rank 0 takes them; they are held until the run ends). The other ranks call it without
// `lock` after rank 0 did: every rank then writes under descriptors opened at the start.
std::vector<std::unique_ptr<RunLock>> lock_run_directories(const std::string &output_dir,
                                                           const std::string &checkpoint_dir, bool lock = true);

// Every rank's hold on the run's directories: rank 0 locks them (lock_run_directories) and claims the
// output directory for run.name (claim_output_dir); then the other ranks hold them open without a lock,
// so that their files (their shards of each checkpoint) go where the run started too.
std::vector<std::unique_ptr<RunLock>> take_run_directories(Communicator &comm, const std::string &output_dir,
                                                           const std::string &checkpoint_dir,
                                                           const std::string &run_name, const std::string &where);

// One run.name per output directory: its steps.jsonl, steps.csv and summary.json are one run's. The
// first run that writes there records its run.name in OUTPUT_DIR/.zfcore-run; a run of another name
// is refused (zf::Error naming both names, `where` the key's position, and what to do) before it
// replaces the first's files or mixes its rows into a resume. Rank 0 calls it under the lock.
void claim_output_dir(const std::string &output_dir, const std::string &run_name, const std::string &where);

}  // namespace zf
