// engine.hpp: the step loop the core owns. One optimizer step:
//   for each micro-batch: forward block by block (stage hooks around each), loss, backward
//   (gradients accumulate in the flat buffer); stage.reduce_gradients (sum over ranks);
//   optimizer.step on this rank's shard of the fp32 master; master -> working params;
//   stage.gather_parameters.
#pragma once

#include "config/config.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/runtime.hpp"

#include <string>

namespace zf {

struct RunSummary {
  int64_t first_step = 1;  // > 1 when the run resumed from a checkpoint
  int64_t steps = 0;       // the last step run
  int stop_signal = 0;     // SIGTERM/SIGINT that stopped the run early (after a checkpoint), or 0
  double initial_loss = 0;
  double final_loss = 0;
  double eval_loss = 0;    // the last evaluation's (train.eval_every > 0)
  double mean_step_ms = 0;
  std::string param_digest;
  std::string output_dir;
};

// Trains as the config says and writes the outputs; throws zf::Error on any failure.
RunSummary train(const RunConfig &config, Runtime &runtime, PluginRegistry &registry);

// What train does before it builds anything (zfcore eval does it too): the GPU (run.device),
// deterministic kernels, this rank's cores (run.bind_cores) and torch's threads (run.threads).
void prepare_runtime(const RunConfig &config, Runtime &runtime);

// FNV-1a over bytes, continuing from state (start with kDigestSeed).
constexpr uint64_t kDigestSeed = 1469598103934665603ull;
uint64_t digest_bytes(const void *data, size_t bytes, uint64_t state);

}  // namespace zf
