#include "runtime/timers.hpp"

namespace zf {

uint32_t Timers::id(const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < timers_.size(); ++i)
    if (timers_[i].name == name) return uint32_t(i);
  timers_.push_back(Timer{name, {}, 0, false});
  return uint32_t(timers_.size() - 1);
}

void Timers::start(uint32_t timer) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer < timers_.size()) timers_[timer].started = now;
}

void Timers::stop(uint32_t timer) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer >= timers_.size()) return;
  Timer &t = timers_[timer];
  t.total_ms += std::chrono::duration<double, std::milli>(now - t.started).count();
  t.ran = true;
}

double Timers::elapsed_ms(uint32_t timer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timer < timers_.size() ? timers_[timer].total_ms : 0.0;
}

const std::string &Timers::name(uint32_t timer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timers_.at(timer).name;
}

size_t Timers::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return timers_.size();
}

std::vector<std::pair<std::string, double>> Timers::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::pair<std::string, double>> out;
  for (const Timer &t : timers_)
    if (t.ran) out.emplace_back(t.name, t.total_ms);
  return out;
}

void Timers::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Timer &t : timers_) {
    t.total_ms = 0;
    t.ran = false;
  }
}

}  // namespace zf
