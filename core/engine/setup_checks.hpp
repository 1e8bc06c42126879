// setup_checks.hpp: the checks of a config that need no GPU, no memory and no data read, made
// before anything is set up. `zfcore validate` makes exactly these, and a run makes them first (at
// the start of train()), so that whatever a run refuses for its config alone, validate refuses with
// the same message; what a run refuses later depends on the machine (the GPU, memory, a plugin that
// declines) or on the data's content.
#pragma once

#include "config/config.hpp"

#include <string>
#include <vector>

namespace zf {

class PluginRegistry;

// Throws zf::Error with the refusal. `notes`: the fallback lists' skipped plugins and warnings, for
// the caller to print (validate) or log (a run). `export_only` (zfcore export): [data] is not checked,
// as the export reads no data.
void check_before_setup(const RunConfig &config, PluginRegistry &registry, std::vector<std::string> *notes,
                        bool export_only = false);

}  // namespace zf
