#include "runtime/affinity.hpp"

#include <sched.h>
#include <thread>

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

}  // namespace zf
