#include "bench/memory_bandwidth.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
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

float *allocate(uint64_t numel) {
  return static_cast<float *>(std::aligned_alloc(4096, (numel * 4 + 4095) / 4096 * 4096));
}

void triad(float *a, const float *b, const float *c, uint64_t begin, uint64_t end) {
#if defined(__x86_64__)
  // Non-temporal stores, as STREAM builds use: a is written without being read first.
  const __m128 s = _mm_set1_ps(3.0f);
  for (uint64_t i = begin; i < end; i += 4)
    _mm_stream_ps(a + i, _mm_add_ps(_mm_load_ps(b + i), _mm_mul_ps(s, _mm_load_ps(c + i))));
  _mm_sfence();
#else
  for (uint64_t i = begin; i < end; ++i) a[i] = b[i] + 3.0f * c[i];
#endif
}

// Every load of a vector comes before its stores: a store to m[i] followed by a load of v[i]
// (same offset within a page) would stall on 4K aliasing and understate the ceiling.
#if defined(__x86_64__)
// With the optimizer kernels' prefetch policy (software prefetch on Intel only, where it pays).
__attribute__((target("avx512f"))) void adam_shaped_avx512(float *p, const float *g, float *m,
                                                           float *v, uint64_t begin, uint64_t end,
                                                           bool prefetch) {
  const __m512 b1 = _mm512_set1_ps(0.9f), c1 = _mm512_set1_ps(0.1f), b2 = _mm512_set1_ps(0.999f),
               c2 = _mm512_set1_ps(0.001f), lr = _mm512_set1_ps(1e-3f);
  for (uint64_t i = begin; i < end; i += 16) {
    if (prefetch) {
      _mm_prefetch(reinterpret_cast<const char *>(p + i) + 2048, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(g + i) + 2048, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(m + i) + 2048, _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char *>(v + i) + 2048, _MM_HINT_T0);
    }
    __m512 pv = _mm512_load_ps(p + i), gv = _mm512_load_ps(g + i), mv = _mm512_load_ps(m + i),
           vv = _mm512_load_ps(v + i);
    mv = _mm512_fmadd_ps(b1, mv, _mm512_mul_ps(c1, gv));
    vv = _mm512_fmadd_ps(b2, vv, _mm512_mul_ps(c2, _mm512_mul_ps(gv, gv)));
    pv = _mm512_fnmadd_ps(lr, mv, pv);
    _mm512_store_ps(p + i, pv);
    _mm512_store_ps(m + i, mv);
    _mm512_store_ps(v + i, vv);
  }
}
#endif

void adam_shaped(float *p, const float *g, float *m, float *v, uint64_t begin, uint64_t end) {
#if defined(__x86_64__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool prefetch = __builtin_cpu_is("intel");
  if (avx512) return adam_shaped_avx512(p, g, m, v, begin, end, prefetch);
  const __m128 b1 = _mm_set1_ps(0.9f), c1 = _mm_set1_ps(0.1f), b2 = _mm_set1_ps(0.999f),
               c2 = _mm_set1_ps(0.001f), lr = _mm_set1_ps(1e-3f);
  for (uint64_t i = begin; i < end; i += 4) {
    __m128 pv = _mm_load_ps(p + i), gv = _mm_load_ps(g + i), mv = _mm_load_ps(m + i),
           vv = _mm_load_ps(v + i);
    mv = _mm_add_ps(_mm_mul_ps(b1, mv), _mm_mul_ps(c1, gv));
    vv = _mm_add_ps(_mm_mul_ps(b2, vv), _mm_mul_ps(c2, _mm_mul_ps(gv, gv)));
    pv = _mm_sub_ps(pv, _mm_mul_ps(lr, mv));
    _mm_store_ps(p + i, pv);
    _mm_store_ps(m + i, mv);
    _mm_store_ps(v + i, vv);
  }
#else
  for (uint64_t i = begin; i < end; ++i) {
    const float gi = g[i], mi = 0.9f * m[i] + 0.1f * gi, vi = 0.999f * v[i] + 0.001f * gi * gi;
    p[i] -= 1e-3f * mi;
    m[i] = mi;
    v[i] = vi;
  }
#endif
}

}  // namespace

MemoryProbe::MemoryProbe(uint64_t numel, const std::vector<int> &cores, unsigned threads)
    : numel_((numel + 15) / 16 * 16),
      cores_(cores),
      threads_(threads ? threads : 1),
      p_(allocate(numel_)),
      g_(allocate(numel_)),
      m_(allocate(numel_)),
      v_(allocate(numel_)) {
  parallel([](MemoryProbe &self, uint64_t begin, uint64_t end) {
    for (uint64_t i = begin; i < end; ++i) {
      self.p_[i] = 1.0f;
      self.g_[i] = 0.5f;
      self.m_[i] = self.v_[i] = 0.0f;
    }
  });
}

MemoryProbe::~MemoryProbe() {
  for (float *buffer : {p_, g_, m_, v_}) std::free(buffer);
}

// Each thread streams one contiguous range, the same one every pass and at the first touch: its
// pages are then in its own core's memory node, so on a host of several nodes (two sockets) the
// probe reads local memory as each rank's optimizer threads do (their pinned state first touched by
// them), where ranges handed out dynamically would send about half of the traffic across sockets.
// The clock starts once every thread is running on its core, as the optimizers' pools are:
// creating and pinning 32 threads takes a few ms. Returns the seconds from then to the last
// thread done.
double MemoryProbe::parallel(void (*body)(MemoryProbe &, uint64_t, uint64_t)) {
  std::atomic<unsigned> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> workers;
  const uint64_t per_thread = (numel_ / 16 + threads_ - 1) / threads_ * 16;  // whole vectors of 16 floats
  for (unsigned t = 0; t < threads_; ++t) {
    const int core = cores_.empty() ? -1 : cores_[t % cores_.size()];
    const uint64_t begin = std::min<uint64_t>(numel_, t * per_thread), end = std::min<uint64_t>(numel_, begin + per_thread);
    workers.emplace_back([this, body, core, begin, end, &ready, &go] {
#if defined(__linux__)
      if (core >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(core, &set);
        pthread_setaffinity_np(pthread_self(), sizeof set, &set);
      }
#endif
      ready.fetch_add(1);
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      if (begin < end) body(*this, begin, end);
    });
  }
  while (ready.load() < threads_) std::this_thread::yield();
  const auto start = std::chrono::steady_clock::now();
  go.store(true, std::memory_order_release);
  for (auto &worker : workers) worker.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double MemoryProbe::triad_seconds() {
  return parallel([](MemoryProbe &self, uint64_t begin, uint64_t end) {
    triad(self.m_, self.p_, self.g_, begin, end);
  });
}

double MemoryProbe::adam_shaped_seconds() {
  return parallel([](MemoryProbe &self, uint64_t begin, uint64_t end) {
    adam_shaped(self.p_, self.g_, self.m_, self.v_, begin, end);
  });
}

}  // namespace zf::bench
