// Writes cut short by a signal, and the temporaries of a process that was killed (files_interrupted.hpp).
#include "runtime/files_interrupted.hpp"

#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

namespace zf {
namespace {

constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
std::atomic<int> cancel_signal{0};

extern "C" void cancel_writes(int signal) { cancel_signal.store(signal); }

}  // namespace

CancelWritesOnSignal::CancelWritesOnSignal() {
  cancel_signal = 0;
  struct sigaction action {};
  action.sa_handler = cancel_writes;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &previous_[i]);
}

CancelWritesOnSignal::~CancelWritesOnSignal() {
  const int received = cancel_signal.exchange(0);
  for (int i = 0; i < 3; ++i) {
    sigaction(kSignals[i], &previous_[i], nullptr);
    if (kSignals[i] == received && previous_[i].sa_handler != SIG_DFL && previous_[i].sa_handler != SIG_IGN &&
        !(previous_[i].sa_flags & SA_SIGINFO))
      previous_[i].sa_handler(received);  // e.g. a run's stop request, which stops after the export
  }
}

int write_cancel_signal() { return cancel_signal.load(std::memory_order_relaxed); }

std::string record_writer(const Directory &directory, const std::string &record) {
  std::string text, removed;
  if (directory.kind_of(record) == "file" && read_regular_file(directory.path_of(record), 256, &text).empty()) {
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    // A token is "<pid>-<8 hex digits>" (process_token()); its process, if it still runs, is left alone.
    const size_t dash = text.find('-');
    const int pid = dash == std::string::npos ? 0 : std::atoi(text.substr(0, dash).c_str());
    const bool gone = pid > 0 && text != process_token() && kill(pid, 0) != 0 && errno == ESRCH;
    if (gone && text.size() == dash + 9 && text.find_first_not_of("0123456789abcdef-") == std::string::npos) {
      std::vector<std::string> names;
      if (DIR *entries = fdopendir(dup(directory.fd()))) {
        while (dirent *entry = readdir(entries)) {
          const std::string name = entry->d_name;
          const std::string mark = ".zf-" + text + "-";
          if (name.size() > 4 && name[0] == '.' && name.find(mark) != std::string::npos &&
              name.compare(name.size() - 4, 4, ".tmp") == 0)
            names.push_back(name);
        }
        closedir(entries);
      }
      for (const std::string &name : names)
        if (unlinkat(directory.fd(), name.c_str(), 0) == 0) removed += (removed.empty() ? "" : ", ") + name;
    }
  }
  directory.write_atomically(record, process_token() + "\n");
  return removed;
}

void forget_writer(const Directory &directory, const std::string &record) {
  std::string text;
  if (directory.kind_of(record) != "file" || !read_regular_file(directory.path_of(record), 256, &text).empty()) return;
  if (text == process_token() + "\n") unlinkat(directory.fd(), record.c_str(), 0);
}

}  // namespace zf
