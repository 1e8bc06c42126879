// run_setup.cpp: the GPU, deterministic kernels, this rank's cores, torch's threads and the attention kernel.
#include "engine/run_setup.hpp"

#include "engine/attention_choice.hpp"

#include "runtime/affinity.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/parallel.hpp"

#include <torch/torch.h>

#include <algorithm>

namespace zf {
namespace {

// Each rank of a host takes its own physical cores; a GPU run pins its training thread to one or two
// of them and leaves the rest to the optimizer workers (plugins read them through worker_cores).
// Returns the number of cores the training thread has (0 = not bound).
size_t bind_cores(const RunConfig &config, Runtime &runtime) {
  set_bulk_cores({});
  if (!config.boolean("run", "bind_cores")) return 0;
  bool gpu = runtime.device == ZF_DEVICE_CUDA;
  int local_rank = runtime.comm->local_rank(), local_size = runtime.comm->local_size();
  double trainer_fraction =
      config.has_table("zenflow") ? zenflow_trainer_fraction(config.real("zenflow", "pt_reserved_cores_perc"), local_size)
                                  : 0.0;
  CoreBinding binding = split_cores(physical_cores(allowed_cores()), local_rank, local_size, gpu, trainer_fraction);
  if (binding.workers.empty()) return 0;
  runtime.worker_cores = binding.workers;
  std::vector<int> share = binding.trainer;  // the rank's cores (a CPU run: trainer and workers are the same)
  for (int core : binding.workers)
    if (std::find(share.begin(), share.end(), core) == share.end()) share.push_back(core);
  set_bulk_cores(share);
  bool pinned = gpu && pin_this_thread(binding.trainer);
  log_info(format("cores: local rank %d of %d: training thread %s %s, optimizer workers on %s%s", local_rank,
                  local_size, pinned ? "pinned to" : "on", core_list(binding.trainer).c_str(),
                  core_list(binding.workers).c_str(),
                  binding.shared ? " (fewer physical cores than ranks on this host: ranks share cores)" : ""));
  return binding.trainer.size();
}

}  // namespace

void prepare_runtime(const RunConfig &config, Runtime &runtime) {
  if (config.string("run", "device") == "cuda" && runtime.device != ZF_DEVICE_CUDA) use_cuda_device(runtime);
  if (config.boolean("run", "deterministic")) use_deterministic_kernels();
  runtime.device_memory_limit = uint64_t(config.real("run", "device_memory_limit_gb") * double(1ull << 30));
  size_t trainer_cores = bind_cores(config, runtime);
  int64_t threads = config.integer("run", "threads");
  if (threads == 0) threads = int64_t(trainer_cores);
  if (threads == 0)
    threads = std::max<int64_t>(1, int64_t(runtime.worker_cores.size()) / std::max(1, runtime.comm->local_size()));
  torch::set_num_threads(int(std::max<int64_t>(1, threads)));
  choose_attention_kernel(config, runtime);  // model.attention, on a GPU
}

}  // namespace zf
