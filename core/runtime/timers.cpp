#include "runtime/timers.hpp"

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unistd.h>

namespace zf {

Timers::Timers() = default;

Timers::~Timers() { reset(); }

void Timers::set_event_clock(std::unique_ptr<EventClock> clock) {
  reset();
  std::lock_guard<std::mutex> lock(mutex_);
  clock_ = std::move(clock);
}

uint32_t Timers::id(const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t i = 0; i < timers_.size(); ++i)
    if (timers_[i].name == name) return uint32_t(i);
  timers_.push_back(Timer{name, {}, 0, false, nullptr, {}});
  return uint32_t(timers_.size() - 1);
}

void Timers::start(uint32_t timer, void *stream) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer >= timers_.size()) return;
  Timer &t = timers_[timer];
  if (stream && clock_) {
    if (t.start_event) clock_->recycle(t.start_event);
    t.start_event = clock_->record(stream);
  } else {
    t.started = now;
  }
}

void Timers::stop(uint32_t timer, void *stream) {
  auto now = std::chrono::steady_clock::now();
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer >= timers_.size()) return;
  Timer &t = timers_[timer];
  if (stream && clock_ && t.start_event) {
    t.intervals.emplace_back(t.start_event, clock_->record(stream));
    t.start_event = nullptr;
  } else {
    t.total_ms += std::chrono::duration<double, std::milli>(now - t.started).count();
  }
  t.ran = true;
}

void Timers::settle(Timer &t) const {
  for (auto &[from, to] : t.intervals) {
    t.total_ms += clock_->elapsed_ms(from, to);
    clock_->recycle(from);
    clock_->recycle(to);
  }
  t.intervals.clear();
}

double Timers::elapsed_ms(uint32_t timer) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (timer >= timers_.size()) return 0.0;
  settle(timers_[timer]);
  return timers_[timer].total_ms;
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
  for (Timer &t : timers_) {
    settle(t);
    if (t.ran) out.emplace_back(t.name, t.total_ms);
  }
  return out;
}

void Timers::reset() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (Timer &t : timers_) {
    if (clock_) {
      for (auto &[from, to] : t.intervals) {
        clock_->recycle(from);
        clock_->recycle(to);
      }
      if (t.start_event) clock_->recycle(t.start_event);
    }
    t.intervals.clear();
    t.start_event = nullptr;
    t.total_ms = 0;
    t.ran = false;
  }
}

namespace {
double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double process_seconds() {
  // /proc/self/stat field 22: start time in clock ticks after boot; the fields before it follow
  // the command name, which may hold spaces, so they are counted from its closing parenthesis.
  static const double started = [] {
    std::ifstream in("/proc/self/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    size_t name_end = stat.rfind(')');
    std::istringstream fields(name_end == std::string::npos ? "" : stat.substr(name_end + 1));
    std::string field;
    for (int i = 3; i <= 22 && fields >> field; ++i) {}
    timespec boot{};
    if (!fields || clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return steady_seconds();  // from the first call
    double ticks = std::strtod(field.c_str(), nullptr);
    double now = double(boot.tv_sec) + 1e-9 * double(boot.tv_nsec);
    return steady_seconds() - (now - ticks / double(sysconf(_SC_CLK_TCK)));
  }();
  return steady_seconds() - started;
}

}  // namespace zf
