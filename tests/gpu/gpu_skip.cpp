#include "gpu_skip.hpp"

#include "runtime/device.hpp"

#include <cstdio>
#include <cstdlib>

namespace zf::test {

void require_gpus(int count) {
  int present = cuda_device_count();
  if (present >= count) return;
  std::printf("skipped: needs %d GPU(s); %s\n", count,
              cuda_built() ? (std::to_string(present) + " present").c_str() : "this build has no CUDA path");
  std::fflush(stdout);
  std::_Exit(4);
}

}  // namespace zf::test
