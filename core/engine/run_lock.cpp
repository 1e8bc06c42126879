#include "engine/run_lock.hpp"

#include "checkpoint/checkpoint_directory.hpp"
#include "comm/communicator.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/files_held.hpp"
#include "runtime/input.hpp"
#include "runtime/log.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zf {

namespace {

// The holder a lock file names ("pid N on HOST"), "" when it is missing, empty or not a plain file.
std::string holder_in(const Directory &dir) {
  std::string text;
  if (dir.kind_of(".zfcore.lock") != "file" || !read_regular_file(dir.path_of(".zfcore.lock"), 4096, &text).empty())
    return "";
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

RunLock::RunLock(const std::filesystem::path &directory, const std::string &what, bool lock) {
  Directory dir;
  try {
    dir = Directory::open(directory.string(), true);
  } catch (const Error &e) {
    throw Error(format("%s: %s", what.c_str(), e.what()));
  }
  // The lock is on the directory itself (its descriptor, held open until exit): removing or replacing
  // .zfcore.lock cannot break it. The file, locked too, names the holder for the message below.
  dir_fd_ = ::fcntl(dir.fd(), F_DUPFD_CLOEXEC, 0);
  if (!lock) {  // another rank of the run: it holds the directory open, rank 0 holds the lock
    if (dir_fd_ >= 0) hold_directory(directory.string(), dir_fd_);
    return;
  }
  int error = dir_fd_ < 0 || ::flock(dir_fd_, LOCK_EX | LOCK_NB) != 0 ? errno : 0;
  const std::filesystem::path path = directory / ".zfcore.lock";
  if (error == 0) {
    // The lock file is opened without following a link and only when it is a regular file of one name
    // (runtime/files.hpp): a link named .zfcore.lock never truncates the file it points to.
    try {
      fd_ = dir.open_append(".zfcore.lock");
    } catch (const Error &e) {
      throw Error(format("%s: %s", what.c_str(), e.what()));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) error = errno;  // held by a zfcore that locked the file only
  }
  if (error == EWOULDBLOCK) {
    std::string who = holder_in(dir);
    if (who.empty()) who = "another process";
    throw Error(format("%s is in use by %s (another zfcore run): wait for it to end or stop it, or give this run "
                       "a directory of its own", what.c_str(), who.c_str()));
  }
  if (error != 0) {
    log_warn(format("%s: cannot lock %s (%s): nothing keeps a second run out of it", what.c_str(),
                    directory.c_str(), std::strerror(error)));
    return;
  }
  hold_directory(directory.string(), dir_fd_);  // written into by descriptor from now on (runtime/files_held.hpp)
  // A run that ends releases its lock with an empty file: a holder still named is a run that was
  // killed or crashed, whose lock the kernel released with its process.
  const std::string stale = holder_in(dir);
  if (!stale.empty())
    log_info(format("%s: %s names %s, which no longer holds it (that run was killed or crashed): this run takes "
                    "the lock over", what.c_str(), path.c_str(), excerpt(stale).c_str()));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string holder = format("pid %d on %s\n", int(::getpid()), host);
  // Appending (O_APPEND) to the emptied file: the holder is its only line.
  if (::ftruncate(fd_, 0) != 0 || ::write(fd_, holder.data(), holder.size()) != ssize_t(holder.size()))
    log_warn(format("%s: cannot write %s (%s)", what.c_str(), path.c_str(), std::strerror(errno)));
}

RunLock::~RunLock() {
  // Released: the file names no holder (a run that is killed leaves its name, see above).
  if (fd_ >= 0) {
    [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);
    ::close(fd_);
  }
  if (dir_fd_ >= 0) release_directory(dir_fd_);
  if (dir_fd_ >= 0) ::close(dir_fd_);
}

std::vector<std::unique_ptr<RunLock>> lock_run_directories(const std::string &output_dir,
                                                           const std::string &checkpoint_dir, bool lock) {
  std::vector<std::unique_ptr<RunLock>> locks;
  locks.push_back(std::make_unique<RunLock>(output_dir, format("run.output_dir = \"%s\"", output_dir.c_str()), lock));
  std::error_code ec;
  if (!checkpoint_dir.empty() && !std::filesystem::equivalent(checkpoint_dir, output_dir, ec))
    locks.push_back(
        std::make_unique<RunLock>(checkpoint_dir, format("checkpoint.dir = \"%s\"", checkpoint_dir.c_str()), lock));
  return locks;
}

std::vector<std::unique_ptr<RunLock>> take_run_directories(Communicator &comm, const std::string &output_dir,
                                                           const std::string &checkpoint_dir,
                                                           const std::string &run_name, const std::string &where) {
  std::vector<std::unique_ptr<RunLock>> held;
  if (comm.rank() == 0) {
    held = lock_run_directories(output_dir, checkpoint_dir);
    claim_output_dir(output_dir, run_name, where);
  }
  // Once rank 0 has made them (a rank 0 refused ends the job: main's error handler).
  if (comm.world_size() > 1 && first_finding(comm, "").empty() && comm.rank() != 0)
    held = lock_run_directories(output_dir, checkpoint_dir, /*lock=*/false);
  return held;
}

namespace {

// The files a run writes into its output directory (report/report.cpp), each replaced whole.
const char *const kRunOutputs[] = {"steps.jsonl", "steps.csv", "summary.json", "report.html"};

// True when `name` in `out` is a step log zfcore wrote: empty, or its first line a row {"step":N,...}.
bool is_zfcore_step_log(const Directory &out, const std::string &name) {
  if (out.kind_of(name) != "file") return false;
  bool ours = true;
  for_each_line(out.path_of(name), 4096, [&](const TextLine &line) {
    ours = line.text.rfind("{\"step\":", 0) == 0;
    return false;  // the first line only
  });
  return ours;
}

// Before a run replaces the files of kRunOutputs: a directory, FIFO or device named like a step log
// is refused (a rename cannot replace it, and it is not ours); and in a directory that records no run
// (`claimed` false), files of those names are replaced only beside a step log zfcore wrote (a
// directory of an older zfcore, from before .zfcore-run). Anything else is the user's: a data
// directory given as run.output_dir keeps its summary.json or steps.csv. Throws zf::Error naming them.
void require_own_outputs(const Directory &out, bool claimed, const std::string &run_name, const std::string &where) {
  std::vector<std::string> files;
  for (const char *name : kRunOutputs) {
    const std::string kind = out.kind_of(name);
    // The step logs are replaced as the run starts (summary.json and report.html at its end, where
    // one that cannot be written is reported after the checkpoint and the export).
    const bool at_start = std::string(name).rfind("steps.", 0) == 0;
    ZF_REQUIRE(!at_start || kind.empty() || kind == "file" || kind == "link",
               "%s is a %s, not a file a run wrote; the run writes its %s there (replacing it whole): move it away, "
               "or give this run another run.output_dir", out.path_of(name).c_str(),
               kind == "dir" ? "directory" : "FIFO, socket or device", name);
    if (kind == "file") files.push_back(name);
  }
  if (claimed || files.empty() || is_zfcore_step_log(out, "steps.jsonl")) return;
  std::string names;
  for (const std::string &name : files) names += (names.empty() ? "" : ", ") + name;
  throw Error(format("run.output_dir = \"%s\" holds %s, which no zfcore run wrote (no %s records a run there and "
                     "no zfcore step log is beside them); this run, run.name = \"%s\" at %s, would replace them: "
                     "move them away, or give the run a directory of its own (the default is runs/%s)",
                     out.path().c_str(), names.c_str(), ".zfcore-run", run_name.c_str(), where.c_str(),
                     run_name.c_str()));
}

}  // namespace

void claim_output_dir(const std::string &output_dir, const std::string &run_name, const std::string &where) {
  const Directory out = Directory::open(output_dir, true, "run.output_dir");
  const char *record = ".zfcore-run";
  const std::string kind = out.kind_of(record);
  std::string text;
  const std::string why = kind.empty() ? "" : kind != "file" ? "is a " + kind + ", not the file zfcore writes"
                                                              : read_regular_file(out.path_of(record), 4096, &text);
  ZF_REQUIRE(why.empty(), "%s: %s (where zfcore records the run.name of the directory's step log): remove it",
             out.path_of(record).c_str(), why.c_str());
  // The name as written (run.name + "\n"): a name that ends in a blank is that name.
  if (!text.empty() && text.back() == '\n') text.pop_back();
  require_own_outputs(out, !kind.empty(), run_name, where);  // another run.name is refused below
  if (!kind.empty() && text == run_name) return;
  // A record with none of its run's files (that run was refused before it wrote any): nothing to mix.
  bool any_output = false;
  for (const char *name : kRunOutputs) any_output |= !out.kind_of(name).empty();
  if (!kind.empty() && !any_output) {
    log_info(format("%s names the run \"%s\", which left no step log or summary here: this run, \"%s\", takes "
                    "the directory", out.path_of(record).c_str(), excerpt(text).c_str(), run_name.c_str()));
    out.write_atomically(record, run_name + "\n");
    return;
  }
  std::string recorded_in = kind.empty() ? "" : out.path_of(record);
  if (kind.empty() && any_output) {  // no record (removed by hand): the run its checkpoints name, if another
    std::vector<std::filesystem::path> others;
    checkpoints_of_run(std::filesystem::path(output_dir) / "checkpoints", run_name, &others, false, nullptr);
    if (!others.empty()) text = checkpoint_run_name(others.back()), recorded_in = others.back().string();
  }
  ZF_REQUIRE(recorded_in.empty(), "run.output_dir = \"%s\" holds the step log and summary (steps.jsonl, steps.csv, "
             "summary.json) of the run \"%s\" (its run.name, recorded in %s); this run, run.name = \"%s\" at %s, "
             "would replace them, and a resume would mix the two runs' rows: give it a run.output_dir of its own (the "
             "default is runs/%s), or set run.name = \"%s\" to continue that run", output_dir.c_str(),
             excerpt(text).c_str(), recorded_in.c_str(), run_name.c_str(), where.c_str(), run_name.c_str(),
             excerpt(text).c_str());
  out.write_atomically(record, run_name + "\n");
}

}  // namespace zf
