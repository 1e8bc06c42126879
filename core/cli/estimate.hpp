// estimate.hpp: the input of the memory estimate (engine/memory_estimate.hpp) for a config, as
// `zfcore estimate` and `zfcore bench` compute it.
#pragma once

#include "config/config.hpp"
#include "memory/memory_estimate.hpp"

#include <string>

namespace zf {

// Blocks of the config's model, its compute and optimizer-state bytes and the stage's knobs, on
// `world` ranks. what: the model in words; note: an assumption made (unknown optimizer), or left.
EstimateInput estimate_input(const RunConfig &config, uint64_t world, std::string *what, std::string *note);

}  // namespace zf
