// stop_signal.hpp: SIGTERM, SIGINT and SIGHUP during a run: the first one is recorded (and, on the
// rank that says so, answered at once on stderr); the run checkpoints at the end of the step and stops.
#pragma once

#include <csignal>

#include <atomic>

namespace zf {

extern std::atomic<int> g_stop_signal;  // the signal received, 0 = none

// Installs the handler for the run's lifetime and puts the previous handlers back after it.
struct SignalGuard {
  static constexpr int kSignals[3] = {SIGTERM, SIGINT, SIGHUP};
  struct sigaction previous[3] {};
  explicit SignalGuard(bool notice);
  ~SignalGuard();
};

}  // namespace zf
