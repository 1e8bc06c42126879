// parallel.hpp: bulk host work outside the steps (initialising and hashing the parameters) spread
// over this rank's cores, whatever torch's thread count for the training thread is.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace zf {

// The cores bulk work runs on: this rank's share once the run has bound its cores (bind_cores),
// else those the calling thread may use.
void set_bulk_cores(std::vector<int> cores);

// Calls fn(i) once for every i in [0, n), in no particular order, from threads on the bulk cores.
// The first exception a call throws is rethrown here once every thread is done.
void parallel_chunks(int64_t n, const std::function<void(int64_t)> &fn);

// The same with `threads` threads (at most n), however many bulk cores there are: for calls that
// mostly wait on the disk, where the requests in flight set the pace, not the cores.
void parallel_waiting(int64_t n, int threads, const std::function<void(int64_t)> &fn);

}  // namespace zf
