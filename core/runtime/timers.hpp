// timers.hpp: named timers for the step breakdown (fwd, bwd, bwd_inner, bwd_reduce, step and
// their *_microstep forms, plus whatever plugins register). Host-clock timers measure wall time;
// given a stream and an event clock (CUDA builds, runtime/device.hpp), a timer records events on
// that stream instead and is read when the step's figures are taken: no device-wide synchronize.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zf {

// Events on a device stream (opaque handles). record() returns an event that completes when
// the stream reaches it; elapsed_ms waits for `to` only.
class EventClock {
 public:
  virtual ~EventClock() = default;
  virtual void *record(void *stream) = 0;
  virtual double elapsed_ms(void *from, void *to) = 0;
  virtual void recycle(void *event) = 0;  // back to the pool
};

class Timers {
 public:
  Timers();
  ~Timers();
  void set_event_clock(std::unique_ptr<EventClock> clock);
  uint32_t id(const std::string &name);  // registers once, thread-safe
  // With a stream (and an event clock), the interval is the stream's time between the calls.
  void start(uint32_t timer, void *stream = nullptr);
  void stop(uint32_t timer, void *stream = nullptr);
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
    void *start_event = nullptr;
    std::vector<std::pair<void *, void *>> intervals;  // device events not yet read
  };
  void settle(Timer &timer) const;  // folds device intervals into total_ms (mutex held)
  mutable std::mutex mutex_;
  mutable std::vector<Timer> timers_;
  std::unique_ptr<EventClock> clock_;
};

// Seconds since this process started (the kernel's start time: loading libraries counts), for
// the run's start-up and shut-down phases.
double process_seconds();

// RAII interval on a timer.
class ScopedTimer {
 public:
  ScopedTimer(Timers &timers, uint32_t timer, void *stream = nullptr)
      : timers_(timers), timer_(timer), stream_(stream) {
    timers_.start(timer_, stream_);
  }
  ~ScopedTimer() { timers_.stop(timer_, stream_); }
  ScopedTimer(const ScopedTimer &) = delete;
  ScopedTimer &operator=(const ScopedTimer &) = delete;

 private:
  Timers &timers_;
  uint32_t timer_;
  void *stream_;
};

}  // namespace zf
