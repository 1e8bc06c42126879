// The CPU optimizers' thread pool: every chunk of a job runs once, and the thread that waits takes
// chunks too exactly when none of its cores is a worker's (a GPU run's update thread, which would
// otherwise leave its core idle while the workers stream memory).
#include <catch2/catch.hpp>

#include "thread_pool.hpp"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

using zf::cpu_kernels::ThreadPool;

namespace {

std::vector<int> allowed_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cores;
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int core = 0; core < CPU_SETSIZE; ++core)
      if (CPU_ISSET(core, &set)) cores.push_back(core);
  return cores;
}

struct Job {
  std::vector<std::atomic<int>> runs;
  std::vector<std::thread::id> by;
  explicit Job(size_t chunks) : runs(chunks), by(chunks) {}
  static void chunk(void *context, uint64_t index) {
    auto *job = static_cast<Job *>(context);
    job->by[index] = std::this_thread::get_id();
    job->runs[index].fetch_add(1);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
};

// Runs a 64-chunk job on a pool of one worker pinned to worker_core, started and waited for from a
// thread pinned to caller_core. Returns how many chunks that thread ran; each must run once.
int chunks_run_by_caller(int worker_core, int caller_core) {
  int by_caller = -1;
  std::thread caller([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(caller_core, &set);
    REQUIRE(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0);
    ThreadPool pool({worker_core}, 1);
    Job job(64);
    pool.run(&Job::chunk, &job, job.runs.size());
    by_caller = 0;
    for (size_t i = 0; i < job.runs.size(); ++i) {
      CHECK(job.runs[i].load() == 1);
      by_caller += job.by[i] == std::this_thread::get_id() ? 1 : 0;
    }
  });
  caller.join();
  return by_caller;
}

}  // namespace

TEST_CASE("optimizer: the waiting thread takes chunks only when its cores are not the workers'", "[optimizer]") {
  const std::vector<int> cores = allowed_cores();
  if (cores.size() < 2) {
    WARN("one core allowed: the caller cannot have a core of its own here");
    return;
  }
  // Its own core: it runs its share (half of the chunks, less what the worker steals at the end).
  const int own = chunks_run_by_caller(cores[0], cores[1]);
  CHECK(own >= 16);
  CHECK(own <= 48);
  // The worker's core: it only waits.
  CHECK(chunks_run_by_caller(cores[0], cores[0]) == 0);
}
