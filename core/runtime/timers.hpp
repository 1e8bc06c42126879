// timers.hpp: named timers for the step breakdown (fwd, bwd, bwd_inner, bwd_allreduce, step and
// their *_microstep forms, plus whatever plugins register). Host-clock timers measure wall time;
// device timers (CUDA builds) record events on a stream and are read at the end of the step.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace zf {

class Timers {
 public:
  uint32_t id(const std::string &name);  // registers once, thread-safe
  void start(uint32_t timer);
  void stop(uint32_t timer);
  // Milliseconds accumulated since the last reset, per timer id (0 for timers never stopped).
  double elapsed_ms(uint32_t timer) const;
  const std::string &name(uint32_t timer) const;
  size_t size() const;
  // Names and milliseconds of the timers that ran since the last reset.
  std::vector<std::pair<std::string, double>> snapshot() const;
  void reset();

 private:
  struct Timer {
    std::string name;
    std::chrono::steady_clock::time_point started;
    double total_ms = 0;
    bool ran = false;
  };
  mutable std::mutex mutex_;
  std::vector<Timer> timers_;
};

// RAII interval on a host-clock timer.
class ScopedTimer {
 public:
  ScopedTimer(Timers &timers, uint32_t timer) : timers_(timers), timer_(timer) {
    timers_.start(timer_);
  }
  ~ScopedTimer() { timers_.stop(timer_); }
  ScopedTimer(const ScopedTimer &) = delete;
  ScopedTimer &operator=(const ScopedTimer &) = delete;

 private:
  Timers &timers_;
  uint32_t timer_;
};

}  // namespace zf
