// run_setup.hpp: what a process sets up before it builds a run.
#pragma once

#include "config/config.hpp"
#include "runtime/runtime.hpp"

namespace zf {

// What train does before it builds anything (zfcore eval does it too): the GPU (run.device),
// deterministic kernels, this rank's cores (run.bind_cores), torch's threads (run.threads) and, on
// a GPU, the attention kernel (model.attention).
void prepare_runtime(const RunConfig &config, Runtime &runtime);

}  // namespace zf
