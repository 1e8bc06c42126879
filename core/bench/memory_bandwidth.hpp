// memory_bandwidth.hpp: the memory ceilings an optimizer benchmark is judged against, measured in
// the same run on the same threads: a STREAM-like triad (a = b + s c, non-temporal stores, 12
// bytes per element as STREAM counts them) and an "Adam-shaped" loop (read p, g, m, v; write p,
// m, v; trivial math), the fastest any fp32 Adam can stream on this machine.
#pragma once

#include <cstdint>
#include <vector>

namespace zf::bench {

struct MemoryCeilings {
  double triad_gbs = 0;           // GB/s, STREAM convention
  double adam_shaped_gelems = 0;  // Gelem/s of the Adam-shaped loop (28 bytes per element)
};

// threads workers pinned round-robin to cores (unpinned if empty) over arrays of numel floats;
// the median of repeats runs after one warm-up.
MemoryCeilings measure_memory_ceilings(uint64_t numel, const std::vector<int> &cores,
                                       unsigned threads, int repeats);

}  // namespace zf::bench
