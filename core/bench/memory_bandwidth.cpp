#include "bench/memory_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <thread>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace zf::bench {
namespace {

struct FreeDeleter {
  void operator()(float *p) const { std::free(p); }
};
using Buffer = std::unique_ptr<float, FreeDeleter>;

Buffer allocate(uint64_t numel) {
  return Buffer(static_cast<float *>(std::aligned_alloc(4096, (numel * 4 + 4095) / 4096 * 4096)));
}

// Runs body(begin, end) on threads pinned workers over [0, numel) in 64-byte aligned slices.
void parallel(uint64_t numel, const std::vector<int> &cores, unsigned threads,
              const std::function<void(uint64_t, uint64_t)> &body) {
  std::vector<std::thread> workers;
  for (unsigned t = 0; t < threads; ++t) {
    const uint64_t begin = numel * t / threads / 16 * 16;
    const uint64_t end = t + 1 == threads ? numel : numel * (t + 1) / threads / 16 * 16;
    const int core = cores.empty() ? -1 : cores[t % cores.size()];
    workers.emplace_back([&body, begin, end, core] {
#if defined(__linux__)
      if (core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(core, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      }
#endif
      body(begin, end);
    });
  }
  for (auto &worker : workers) worker.join();
}

double median_seconds(int repeats, const std::function<void()> &run) {
  run();  // warm-up: page faults and frequency ramp stay out of the figure
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void triad(float *a, const float *b, const float *c, float s, uint64_t begin, uint64_t end) {
#if defined(__x86_64__)
  // Non-temporal stores, as STREAM builds use: a is written without being read first.
  const __m128 scalar = _mm_set1_ps(s);
  for (uint64_t i = begin; i < end; i += 4)
    _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(scalar, _mm_load_ps(c + i))));
  _mm_sfence();
#else
  for (uint64_t i = begin; i < end; ++i) a[i] = b[i] + s * c[i];
#endif
}

void adam_shaped(float *__restrict p, const float *__restrict g, float *__restrict m,
                 float *__restrict v, uint64_t begin, uint64_t end) {
  for (uint64_t i = begin; i < end; ++i) {
    m[i] = 0.9f * m[i] + 0.1f * g[i];
    v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
    p[i] = p[i] - 1e-3f * m[i];
  }
}

}  // namespace

MemoryCeilings measure_memory_ceilings(uint64_t numel, const std::vector<int> &cores,
                                       unsigned threads, int repeats) {
  numel = (numel + 15) / 16 * 16;
  Buffer p = allocate(numel), g = allocate(numel), m = allocate(numel), v = allocate(numel);
  parallel(numel, cores, threads, [&](uint64_t begin, uint64_t end) {
    for (uint64_t i = begin; i < end; ++i) {
      p.get()[i] = 1.0f;
      g.get()[i] = 0.5f;
      m.get()[i] = v.get()[i] = 0.0f;
    }
  });
  MemoryCeilings ceilings;
  const double triad_seconds = median_seconds(repeats, [&] {
    parallel(numel, cores, threads, [&](uint64_t begin, uint64_t end) {
      triad(m.get(), p.get(), g.get(), 3.0f, begin, end);
    });
  });
  ceilings.triad_gbs = 12.0 * double(numel) / triad_seconds / 1e9;
  const double adam_seconds = median_seconds(repeats, [&] {
    parallel(numel, cores, threads, [&](uint64_t begin, uint64_t end) {
      adam_shaped(p.get(), g.get(), m.get(), v.get(), begin, end);
    });
  });
  ceilings.adam_shaped_gelems = double(numel) / adam_seconds / 1e9;
  return ceilings;
}

}  // namespace zf::bench
