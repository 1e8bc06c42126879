// zenflow_estimate.hpp: what ZenFlow holds where the model computes on each rank, beside the stage's
// buffers, known before anything runs: `zfcore estimate` prints it and adds it to the GPU peak, and
// `zfcore bench` sets it beside what a row measured. The same functions as the run's (the staggered
// groups of zenflow.cpp, column_selection.hpp's selected elements and topk "auto"), on the layout
// the model would have (built without memory for its parameters).
#pragma once

#include "memory/config_estimate.hpp"
#include "update/column_selection.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

// The staggered schedule's groups of a shard of `numel` elements: `count` parts of about equal
// size, cut on a grid of `bucket` elements when the shard holds count of them (zenflow.hpp). The
// end of each group; the first begins at 0.
std::vector<uint64_t> zenflow_group_ends(uint64_t numel, uint64_t count, uint64_t bucket);

struct ZenFlowEstimate {
  bool staggered = true, lookahead = false, automatic = false;
  int64_t update_interval = 0;
  uint64_t shard = 0, staged = 0;                        // elements: a rank's shard, the staging's
  uint64_t gradient_sum = 0, staging = 0, last_cpu = 0;  // bytes
  // The selected columns: the ratio (fixed, or what "auto" would choose where the memory it fills
  // is known; else its least, kMinAutoTopk), the rank that holds the most elements, and how many.
  double topk = 0;
  bool room_known = false, tables = false, table_rows = false;  // tables: the model has an embedding to choose among
  std::string room_why;  // auto: the memory it would fill, or why it is not known
  uint64_t rank = 0, selected = 0;
  SelectedElementBytes element;
  uint64_t selected_bytes() const { return selected * element.held; }
  uint64_t buffers() const { return gradient_sum + staging + last_cpu; }
  uint64_t total() const { return buffers() + selected_bytes(); }
};

// ZenFlow's bytes per rank for the config (which has a [zenflow] table) and its estimate `e`.
// capacity: where the model computes, the bytes topk "auto" may fill (run.device_memory_limit_gb,
// or the GPU's; 0: unknown); first_peak: the first step's peak there before the selected columns
// (the stage's buffers and the activations; ZenFlow's own buffers are added here).
ZenFlowEstimate estimate_zenflow(const RunConfig &config, const ConfigEstimate &e, uint64_t capacity,
                                 uint64_t first_peak);

// The capacity estimate_zenflow takes for the config: run.device_memory_limit_gb, else on a GPU
// run where this machine has one, its free memory now; 0 otherwise.
uint64_t zenflow_capacity(const RunConfig &config);

}  // namespace zf
