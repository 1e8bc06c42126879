// thread_pool.hpp: ThreadPool, a persistent set of worker threads, each pinned to one core of the
// list the host reserved for plugin workers, that runs one job at a time.
//
// A job is chunk_count calls of run_chunk(context, chunk). Worker t first runs its own static
// share of chunks [t*C/N, (t+1)*C/N) in order (so the same thread touches the same memory every
// step, which is what first-touch placement relies on), then steals what is left of the others'
// shares (so a core the hypervisor or another process takes away does not stall the step).
// start returns at once; wait blocks the caller until every chunk ran. A caller that may run on no
// worker's core (a GPU run's update thread, on the training thread's cores) takes chunks too while
// it waits, from a share of its own: the core it would otherwise leave idle streams memory as
// well. Not reentrant: one job at a time, started and waited for from one thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zf::cpu_kernels {

class ThreadPool {
 public:
  using ChunkFn = void (*)(void *context, uint64_t chunk);

  // threads workers; worker i is pinned to cores[i % cores.size()] (no pinning if cores is empty).
  ThreadPool(const std::vector<int> &cores, unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool &) = delete;
  ThreadPool &operator=(const ThreadPool &) = delete;

  unsigned size() const { return unsigned(workers_.size()); }
  // Whether the calling thread takes chunks in wait(): none of the cores it may run on is a
  // worker's (false for a pool without pinning).
  bool caller_helps() const;
  // Cores a worker could not be pinned to (the host's list names a core we may not use).
  const std::vector<int> &unpinned_cores() const { return unpinned_cores_; }

  void start(ChunkFn run_chunk, void *context, uint64_t chunk_count);
  void wait();
  bool busy() const;
  // start + wait.
  void run(ChunkFn run_chunk, void *context, uint64_t chunk_count) {
    start(run_chunk, context, chunk_count);
    wait();
  }

 private:
  struct alignas(64) Share {  // one cache line per worker: no false sharing of the cursors
    std::atomic<uint64_t> next{0};
    uint64_t end = 0;
  };
  void worker_main(unsigned index, int core);
  void work(unsigned index);
  unsigned shares() const { return size() + 1; }  // one per worker, the last one the caller's

  std::vector<std::thread> workers_;
  std::vector<int> cores_;
  std::unique_ptr<Share[]> shares_;  // shares(): the caller's share is empty unless it helps
  std::vector<int> unpinned_cores_;
  unsigned pinned_ = 0;  // workers past their pinning attempt

  bool caller_takes_ = false;  // the job's caller helps (start and wait run on the caller's thread)
  ChunkFn run_chunk_ = nullptr;
  void *context_ = nullptr;

  mutable std::mutex mutex_;
  std::condition_variable wake_;      // workers wait here for a new generation
  std::condition_variable finished_;  // the caller waits here for remaining_ == 0 (or pinned_)
  uint64_t generation_ = 0;
  unsigned remaining_ = 0;  // workers still inside the current job
  bool job_open_ = false;
  bool stopping_ = false;
};

}  // namespace zf::cpu_kernels
