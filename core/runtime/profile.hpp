// profile.hpp: a trace of chosen training steps from torch's profiler (Kineto: each operator on the
// host, each kernel on the GPU), for per-operation tables (tools/profile_ops.py sums the kernels by
// kind). Asked for with ZF_PROFILE=FILE.json[:FIRST[:COUNT]] (default: 2 steps from step 6); the
// Chrome-trace file is written before step FIRST + COUNT (or when the run ends before it). Costs
// nothing when unset.
#pragma once

#include <cstdint>
#include <string>

namespace zf {

class StepProfile {
 public:
  StepProfile();  // reads ZF_PROFILE
  ~StepProfile();  // saves what a run that ended early traced
  // Before each step, the earlier steps' GPU work done: starts the profiler at FIRST, saves the
  // trace at FIRST + COUNT.
  void at_step(int64_t step);

 private:
  std::string path_;
  int64_t first_ = 6, count_ = 2;
  bool running_ = false;
};

}  // namespace zf
