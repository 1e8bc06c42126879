#include "thread_pool.hpp"

#include <stdexcept>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace zf::cpu_kernels {

ThreadPool::ThreadPool(const std::vector<int> &cores, unsigned threads)
    : cores_(cores), shares_(new Share[(threads ? threads : 1) + 1]) {
  if (threads == 0) threads = 1;
  workers_.reserve(threads);
  for (unsigned i = 0; i < threads; ++i) {
    const int core = cores.empty() ? -1 : cores[i % cores.size()];
    workers_.emplace_back([this, i, core] { worker_main(i, core); });
  }
  // Wait until every worker has tried its pinning, so unpinned_cores() is complete.
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return pinned_ == threads; });
}

ThreadPool::~ThreadPool() {
  if (busy()) wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto &worker : workers_) worker.join();
}

bool ThreadPool::busy() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return job_open_;
}

bool ThreadPool::caller_helps() const {
#if defined(__linux__)
  if (cores_.empty()) return false;
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return false;
  for (int core : cores_)
    if (core >= 0 && core < CPU_SETSIZE && CPU_ISSET(core, &allowed)) return false;
  return true;
#else
  return false;
#endif
}

void ThreadPool::start(ChunkFn run_chunk, void *context, uint64_t chunk_count) {
  const bool helps = caller_helps();
  const unsigned takers = size() + (helps ? 1 : 0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job_open_) throw std::logic_error("thread pool: start while a job is running");
    caller_takes_ = helps;
    run_chunk_ = run_chunk;
    context_ = context;
    for (unsigned t = 0; t < shares(); ++t) {  // a caller that does not help has an empty share
      shares_[t].next.store(t < takers ? chunk_count * t / takers : 0, std::memory_order_relaxed);
      shares_[t].end = t < takers ? chunk_count * (t + 1) / takers : 0;
    }
    remaining_ = size();
    job_open_ = true;
    ++generation_;
  }
  wake_.notify_all();
}

void ThreadPool::wait() {
  if (caller_takes_) work(size());  // its own share, then what is left of the workers'
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [this] { return remaining_ == 0; });
  job_open_ = false;
}

void ThreadPool::worker_main(unsigned index, int core) {
#if defined(__linux__)
  if (core >= 0) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(core, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
      std::lock_guard<std::mutex> lock(mutex_);
      unpinned_cores_.push_back(core);
    }
  }
#else
  (void)core;
#endif
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++pinned_;
  }
  finished_.notify_all();
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
    }
    work(index);
    bool last;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      last = --remaining_ == 0;
    }
    if (last) finished_.notify_all();
  }
}

void ThreadPool::work(unsigned index) {
  const unsigned count = shares();
  // Own share first, then the others', starting with the next one.
  for (unsigned offset = 0; offset < count; ++offset) {
    Share &share = shares_[(index + offset) % count];
    for (;;) {
      const uint64_t chunk = share.next.fetch_add(1, std::memory_order_relaxed);
      if (chunk >= share.end) break;
      run_chunk_(context_, chunk);
    }
  }
}

}  // namespace zf::cpu_kernels
