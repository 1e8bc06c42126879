// runtime.hpp: what the core hands to every plugin through zf_host: the communicator, the memory
// ledger, the timers, the compute device and the cores reserved for plugin worker threads.
#pragma once

#include "comm/communicator.hpp"
#include "runtime/memory.hpp"
#include "runtime/timers.hpp"

#include <memory>
#include <vector>

namespace zf {

struct Runtime {
  std::unique_ptr<Communicator> comm;
  MemoryLedger memory;
  Timers timers;
  zf_device device = ZF_DEVICE_CPU;
  int device_index = 0;
  void *compute_stream = nullptr;
  void *comm_stream = nullptr;  // the stages' collectives that overlap compute (GPU runs)
  std::vector<int> worker_cores;  // for plugin worker threads (see runtime/affinity.hpp)
  // run.device_memory_limit_gb in bytes: what the update's "auto" choices may fill where the model
  // computes (0 = the GPU's memory; a CPU run then has no figure).
  uint64_t device_memory_limit = 0;

  // A single-process CPU runtime (tests, benchmarks): rank 0 of 1, all allowed cores for workers.
  static std::unique_ptr<Runtime> single_cpu();
};

}  // namespace zf
