// memory_bandwidth.hpp: MemoryProbe, the memory ceilings an optimizer benchmark is judged
// against, run in the same rounds as the optimizers on the same threads: a STREAM-like triad
// (a = b + s c, non-temporal stores, 12 bytes per element as STREAM counts them) and an
// "Adam-shaped" loop (read p, g, m, v; write p, m, v; trivial math), the fastest any fp32 Adam
// can stream on this machine (28 bytes per element).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace zf::bench {

class MemoryProbe {
 public:
  // Four arrays of numel floats, each thread's range first touched by the thread that streams it;
  // threads workers pinned round-robin to cores (unpinned if cores is empty).
  MemoryProbe(uint64_t numel, const std::vector<int> &cores, unsigned threads);
  ~MemoryProbe();
  // One pass each; they return seconds.
  double triad_seconds();
  double adam_shaped_seconds();
  uint64_t numel() const { return numel_; }

 private:
  double parallel(void (*body)(MemoryProbe &, uint64_t, uint64_t));  // seconds, threads running
  uint64_t numel_;
  std::vector<int> cores_;
  unsigned threads_;
  float *p_, *g_, *m_, *v_;
};

}  // namespace zf::bench
