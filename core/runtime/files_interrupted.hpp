// files_interrupted.hpp: writes that are cut short. A signal (SIGTERM, SIGINT, SIGHUP) during an
// export stops its writes, and the export's temporaries are removed as on any failure; a process
// killed outright (SIGKILL, a crash) leaves its temporaries, which the next writer of that directory
// removes when the killed process recorded its token there.
#pragma once

#include <csignal>
#include <string>

namespace zf {

class Directory;

// While one is alive, SIGTERM, SIGINT and SIGHUP make the next PendingFile::write (files.hpp) throw
// zf::Error naming the signal, instead of ending the process at once with its temporaries left
// behind. The previous handlers are put back after it (a signal received meanwhile is passed on to a
// handler that was installed, e.g. a run's stop request).
class CancelWritesOnSignal {
 public:
  CancelWritesOnSignal();
  ~CancelWritesOnSignal();
  CancelWritesOnSignal(const CancelWritesOnSignal &) = delete;
  CancelWritesOnSignal &operator=(const CancelWritesOnSignal &) = delete;

 private:
  struct sigaction previous_[3] {};
};
// The signal that cancels writes now (0: none); PendingFile::write checks it.
int write_cancel_signal();

// Records this process's token in the directory's entry `record` (before its temporaries are created),
// and, when `record` names another process's token that no longer runs, first removes that process's
// temporaries (".NAME.zf-<token>-<n>.tmp": only they carry its token). Returns what was removed, for
// the log ("" when nothing). forget_writer() removes the record once the files are in place.
std::string record_writer(const Directory &directory, const std::string &record);
void forget_writer(const Directory &directory, const std::string &record);

}  // namespace zf
