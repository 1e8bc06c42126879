// gpu_skip.hpp: [gpu] cases end with exit code 4 (ctest: skipped) where the GPUs they need are absent.
#pragma once

namespace zf::test {
void require_gpus(int count);  // returns only when this build and machine have `count` GPUs
}  // namespace zf::test
