// memory_estimate.hpp: per-rank memory of a run predicted before it runs, as the run's stage and
// offload plugins report it (their estimate_memory entry, ABI 1.7): the stage's bytes by category
// where the model computes, then where the offload plugin moves them, per tier. `zfcore estimate`
// prints it, the bench sets it beside what a row measured, and a refused memory plan quotes the
// plugins' advice.
#pragma once

#include "memory/host_plan.hpp"
#include "plugin/memory_entry.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

class PluginSet;

struct EstimateInput {
  std::vector<uint64_t> blocks;  // parameter elements per block, in order (layout numel = sum)
  uint64_t world = 1;
  uint64_t compute_bytes = 4;    // working parameters and gradients: fp32 4, bf16 2
  uint64_t state_bytes = 8;      // optimizer state per parameter (Adam 8: m and v in fp32)
  uint64_t alignment = 64;       // elements; shards are rounded up to it
  uint64_t grad_accum = 1;       // micro-steps per optimizer step
  uint64_t grad_bytes = 0;       // the reduced gradients' (train.grad_accum_dtype = "float32": 4); 0 = compute_bytes
};

// One plugin's answer, for one stage.
struct PluginEstimate {
  std::string plugin;
  bool estimated = false;
  std::string why;  // when not estimated ("no estimate: ...")
  uint64_t params = 0, grads = 0, master = 0, state = 0, staging = 0, transient = 0, reference = 0;
  uint64_t tiers[ZF_TIER_COUNT] = {};
  std::string note, advice;
  uint64_t total() const { return params + grads + master + state + staging + transient; }
};

// The stage plugin's estimate of the input.
PluginEstimate estimate_stage(const PluginFile &stage, const PluginConfig &config, const EstimateInput &input);
// Where the offload plugin puts the bytes of `stage` (a stage plugin with capabilities stage_caps).
PluginEstimate estimate_offload(const PluginFile &offload, const PluginConfig &config, const EstimateInput &input,
                                const PluginEstimate &stage, uint64_t stage_caps);

// The ways out of a memory plan that does not fit: the advice of the run's stage and offload
// plugins for the run's shape (its layout, ranks, compute bytes, micro-steps and the optimizer's
// state), then what holds for any run.
std::string memory_advice(const PluginSet &plugins, const zf_layout &layout, uint64_t world, uint64_t compute_bytes,
                          uint64_t grad_accum, uint64_t grad_bytes);

// What could shrink this run's host memory (host_plan.hpp): its optimizer's state in host tiers,
// whether the optimizer takes bf16 moments, whether the nvme plugin is installed.
HostDemand host_demand(const MemoryPlan &plan, const PluginSet &plugins, int ranks_per_host, uint64_t world);
// Whether `optimizer` (a plugin's descriptor) declares moment_dtype and its state is still fp32.
bool moments_halvable(const zf_descriptor &optimizer, uint64_t state_bytes_per_element);
// Whether the nvme offload plugin is installed beside the built-in plugins.
bool nvme_plugin_installed();

}  // namespace zf
