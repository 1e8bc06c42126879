// engine.hpp: the step loop the core owns. One optimizer step:
//   for each micro-batch: forward block by block (stage hooks around each), loss, backward
//   (gradients accumulate in the flat buffer); stage.reduce_gradients (sum over ranks);
//   optimizer.step on this rank's shard of the fp32 master; master -> working params;
//   stage.gather_parameters.
#pragma once

#include "config/config.hpp"
#include "report/run_summary.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/runtime.hpp"

namespace zf {

// Trains as the config says and writes the outputs; throws zf::Error on any failure.
RunSummary train(const RunConfig &config, Runtime &runtime, PluginRegistry &registry);

}  // namespace zf
