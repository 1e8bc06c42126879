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

// Trains as the config says and writes the outputs; throws zf::Error on any failure. `export_only`
// (zfcore export: a checkpoint resumed at its own step, checkpoint.export_hf set) writes only the
// export: no run.output_dir or checkpoint.dir is created, locked or written.
RunSummary train(const RunConfig &config, Runtime &runtime, PluginRegistry &registry, bool export_only = false);

}  // namespace zf
