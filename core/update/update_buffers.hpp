// update_buffers.hpp: what the update of this rank's shard works on, placed by the offload
// plugin and allocated once: the fp32 master, the optimizer state (in memory, or on disk in tiles),
// the gradients the optimizer reads and the compute-precision copy it writes when they live away
// from the model. The schedules (update_schedule.hpp) decide when which elements are updated.
#pragma once

#include "checkpoint/safetensors.hpp"
#include "memory/memory_plan.hpp"
#include "plugin/plugin_set.hpp"
#include "runtime/runtime.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class DiskState;

struct OptimizerSettings {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// The optimizer over element ranges of the shard, on a device.
struct UpdateJob {
  zf_device device = ZF_DEVICE_CPU;
  std::vector<zf_optimizer_range> ranges;  // shard elements, sorted and disjoint
  bool overlapped = false;  // fed bucket by bucket during the backward, on the update thread
};

// Optimizer ranges over [begin, end) of the layout, in shard elements: group 0 decays, group 1
// (biases, norms) does not. A segment's range runs to the next segment, so padding merges into it.
std::vector<zf_optimizer_range> optimizer_ranges(const zf_layout &layout, uint64_t begin, uint64_t end);
// Appends [lo, hi) to sorted ranges, merged into the last one when adjacent and of the same group.
void append_range(std::vector<zf_optimizer_range> &ranges, uint64_t lo, uint64_t hi, uint32_t group);
// The part of `ranges` (sorted, disjoint) inside [begin, end).
std::vector<zf_optimizer_range> clip_ranges(const std::vector<zf_optimizer_range> &ranges, uint64_t begin,
                                            uint64_t end);

bool on_host(zf_tier tier);  // host memory, pinned or not
// offload.ratio's device part: the first elements of a shard of `numel` that the host's share leaves.
uint64_t device_part_of(uint64_t numel, double host_ratio);

class UpdateBuffers {
 public:
  // model_tier: where the model's parameters and gradients live (device on a GPU run). grad_dtype:
  // of the gradients the optimizer reads (float32 under train.grad_accum_dtype = "float32"; an
  // undefined dtype = dtype).
  UpdateBuffers(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin,
                uint64_t shard_end, torch::Dtype dtype, zf_tier model_tier, const OptimizerSettings &settings,
                torch::Dtype grad_dtype = torch::ScalarType::Undefined);
  ~UpdateBuffers();
  UpdateBuffers(const UpdateBuffers &) = delete;
  UpdateBuffers &operator=(const UpdateBuffers &) = delete;

  // Allocates what planned lists and binds the optimizer's state; master starts from params_shard.
  void allocate(const torch::Tensor &params_shard);
  // The optimizer's state for checkpoints: the host-held tensors (not those on disk), or what an
  // optimizer that keeps its own exposes.
  std::vector<std::pair<std::string, torch::Tensor>> optimizer_state();
  uint64_t numel() const { return shard_end - shard_begin; }
  // The block that shard element `element` belongs to: its place in the forward (with the blocks
  // interleaved, the shard's memory order is not the forward's).
  uint32_t block_of(uint64_t element) const;
  // The shard elements from `element` to the end of its block (at most the shard's end).
  uint64_t block_end(uint64_t element) const;
  std::string ratio_text() const;  // offload.ratio as the user wrote it: 0.3 or "auto"
  // For each state tensor of `device` (the optimizer of a part kept where the model computes), the
  // index of the host-held tensor of the same name, whose values it takes over and gives back;
  // `moves` says who moves them, for the error when the host's optimizer has no such tensor or
  // `device` cannot write the working parameters' dtype.
  std::vector<size_t> held_state_of(const OptimizerPlugin &device, const char *moves) const;

  Runtime &runtime;
  PluginSet &plugins;
  const uint64_t shard_begin, shard_end;
  const torch::Dtype dtype;       // of the working parameters
  const torch::Dtype grad_dtype;  // of the gradients the optimizer reads (and their host copy)
  const zf_tier model_tier;
  zf_offload_plan tiers{};  // the offload plugin's choice
  bool offloaded = false;   // the master lives away from the model
  bool writes_in_place = false;  // the optimizer writes the working parameters (host-held, parameter offload)
  // offload.ratio < 1: shard elements [0, device_part) keep a master and state where the model
  // computes and are updated there (split_update.hpp); the host updates the rest.
  uint64_t device_part = 0;
  // offload.ratio = "auto": device_part is chosen after the first step (split_update.hpp).
  bool split_auto = false;
  UpdateJob job;
  std::vector<zf_optimizer_group> groups;  // decay, no decay
  std::vector<PlannedBuffer> planned;      // what allocate() holds, per tier and tag

  torch::Tensor master;                  // fp32, on the master tier
  std::vector<StateSpec> state_specs;    // the optimizer's host-held state (empty: it keeps its own)
  std::vector<torch::Tensor> state;      // ... in memory, or a window of disk tiles
  std::unique_ptr<DiskState> disk;       // the state on disk (NVMe tier), streamed in tiles
  torch::Tensor host_grads;  // gradients the optimizer reads (offload), grad tier
  torch::Tensor params_out;  // compute-precision copy the optimizer writes (offload, bf16/fp16 runs)

 private:
  void check_optimizer_fits();
  // Advice: the installed optimizers that could update this run's master in host memory (on the
  // CPU, writing the working parameters of an offloaded bf16/fp16 run) and have `traits`.
  std::string host_optimizers(uint32_t traits = 0, const char *except = nullptr) const;
  std::vector<std::pair<uint64_t, uint32_t>> block_starts_;  // (layout offset, block), ascending offsets
};

}  // namespace zf
