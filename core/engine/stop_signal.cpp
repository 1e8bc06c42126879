#include "engine/stop_signal.hpp"

#include <unistd.h>

namespace zf {

std::atomic<int> g_stop_signal{0};

namespace {
std::atomic<bool> g_stop_notice{false};  // this rank says what a stop signal does
}  // namespace

extern "C" void request_stop(int signal) {
  if (g_stop_signal.exchange(signal) != 0 || !g_stop_notice) return;
  static const char kNotice[] =
      "zfcore: stop requested: a checkpoint is written at the end of this step, then the run stops; under mpirun "
      "a second Ctrl-C ends the ranks before they save\n";
  ssize_t ignored = ::write(STDERR_FILENO, kNotice, sizeof kNotice - 1);
  (void)ignored;
}

SignalGuard::SignalGuard(bool notice) {
  g_stop_signal = 0;
  g_stop_notice = notice;
  struct sigaction action {};
  action.sa_handler = request_stop;
  sigemptyset(&action.sa_mask);
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &action, &previous[i]);
}

SignalGuard::~SignalGuard() {
  for (int i = 0; i < 3; ++i) sigaction(kSignals[i], &previous[i], nullptr);
}

}  // namespace zf
