#include "runtime/affinity.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace zf {

std::vector<int> allowed_cores() {
  std::vector<int> cores;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int core = 0; core < CPU_SETSIZE; ++core)
      if (CPU_ISSET(core, &set)) cores.push_back(core);
  }
  if (cores.empty())
    for (unsigned core = 0; core < std::thread::hardware_concurrency(); ++core) cores.push_back(int(core));
  return cores;
}

namespace {
int read_topology(int cpu, const char *field) {
  std::ifstream in("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + field);
  int value = -1;
  in >> value;
  return in ? value : -1;
}
}  // namespace

std::vector<int> physical_cores(const std::vector<int> &cores) {
  std::set<std::pair<int, int>> seen;  // (package, core id)
  std::vector<int> physical;
  for (int cpu : cores) {
    int package = read_topology(cpu, "physical_package_id"), core = read_topology(cpu, "core_id");
    if (core < 0 || seen.insert({package, core}).second) physical.push_back(cpu);
  }
  return physical;
}

double zenflow_trainer_fraction(double configured, int local_size) {
  if (configured > 0) return configured;
  return local_size > 1 ? 0.75 : 0.0;
}

CoreBinding split_cores(const std::vector<int> &physical, int local_rank, int local_size, bool gpu_run,
                        double trainer_fraction) {
  CoreBinding binding;
  const size_t n = physical.size(), ranks = size_t(std::max(1, local_size)), rank = size_t(std::max(0, local_rank));
  if (n == 0) return binding;
  std::vector<int> share;
  if (n < ranks) {
    share = {physical[rank % n]};
    binding.shared = true;
  } else {
    share.assign(physical.begin() + long(rank * n / ranks), physical.begin() + long((rank + 1) * n / ranks));
  }
  if (!gpu_run || share.size() == 1) {
    binding.trainer = binding.workers = share;
    return binding;
  }
  // Two: the training thread, and the host's update thread that feeds the optimizer workers (each
  // spins while it waits on the GPU; on one shared core they would slow each other down).
  size_t trainer = share.size() >= 8 ? 2 : 1;
  if (trainer_fraction > 0)
    trainer = std::clamp<size_t>(size_t(std::lround(trainer_fraction * double(share.size()))), 1, share.size() - 1);
  binding.trainer.assign(share.begin(), share.begin() + long(trainer));
  binding.workers.assign(share.begin() + long(trainer), share.end());
  return binding;
}

bool pin_this_thread(const std::vector<int> &cores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int core : cores) CPU_SET(core, &set);
  return !cores.empty() && sched_setaffinity(0, sizeof set, &set) == 0;
}

std::string core_list(const std::vector<int> &cores) {
  std::string text;
  for (size_t i = 0; i < cores.size();) {
    size_t j = i;
    while (j + 1 < cores.size() && cores[j + 1] == cores[j] + 1) ++j;
    text += (text.empty() ? "" : ",") + std::to_string(cores[i]);
    if (j > i) text += "-" + std::to_string(cores[j]);
    i = j + 1;
  }
  return text;
}

}  // namespace zf
