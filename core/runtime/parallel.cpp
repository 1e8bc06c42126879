#include "runtime/parallel.hpp"

#include "runtime/affinity.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace zf {

namespace {
std::mutex g_mutex;
std::vector<int> g_bulk_cores;  // empty: the calling thread's
}  // namespace

void set_bulk_cores(std::vector<int> cores) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_bulk_cores = std::move(cores);
}

namespace {
// threads_wanted <= 0: one thread per core.
void run_parallel(int64_t n, int threads_wanted, const std::function<void(int64_t)> &fn) {
  std::vector<int> cores;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    cores = g_bulk_cores;
  }
  // Threads inherit the caller's affinity (a GPU run pins the training thread to one or two
  // cores), so with bound cores each one moves onto the rank's share first.
  const bool pin = !cores.empty();
  if (!pin) cores = allowed_cores();
  const int64_t threads = std::min<int64_t>(n, threads_wanted > 0 ? threads_wanted : int64_t(cores.size()));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&](bool pin_thread) {
    if (pin_thread) pin_this_thread(cores);
    for (int64_t i = next++; i < n; i = next++) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        if (!failure) failure = std::current_exception();
        next = n;  // the others stop after their current call
      }
    }
  };
  // The calling thread keeps its own affinity: it takes part only when nothing is bound.
  std::vector<std::thread> pool;
  for (int64_t t = pin ? 0 : 1; t < threads; ++t) pool.emplace_back(work, pin);
  if (!pin) work(false);
  for (std::thread &thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

void parallel_chunks(int64_t n, const std::function<void(int64_t)> &fn) { run_parallel(n, 0, fn); }

void parallel_waiting(int64_t n, int threads, const std::function<void(int64_t)> &fn) {
  run_parallel(n, std::max(threads, 1), fn);
}

}  // namespace zf
