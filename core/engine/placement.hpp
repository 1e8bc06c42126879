// placement.hpp: where everything of a run lives, decided once before the first step. The stage
// plugin cuts this rank's shard of the flat buffers; the offload plugin places the update's
// buffers (update_buffers.hpp) and the working parameters; blocks are then resident or gathered
// around their use (residency.hpp: ZeRO-3, parameter offload), and gradients are held whole or per
// block (a stage that reduces per block). The memory plan adds it all up and is checked before
// anything large is allocated.
#pragma once

#include "memory/config_estimate.hpp"
#include "engine/grad_accumulation.hpp"
#include "params/flat_buffers.hpp"
#include "memory/memory_plan.hpp"
#include "params/residency.hpp"
#include "engine/run_options.hpp"
#include "report/run_stats.hpp"
#include "params/sharded_grads.hpp"
#include "update/update_plan.hpp"

#include <memory>

namespace zf {

class Placement {
 public:
  // Checks the memory plan, then allocates the parameters holding `values` (under a stage that
  // shards them only this rank's shard, filled from the source; else the flat buffers, rank 0's
  // on every rank), the update's buffers and the stage's residency; stats marks each phase.
  Placement(const RunConfig &config, const RunOptions &options, Runtime &runtime, PluginSet &plugins,
            FlatBuffers &flat, const Model &model, const ParameterSource &values, int64_t steps_per_epoch,
            RunStats &stats);

  uint64_t shard_begin = 0, shard_end = 0;  // this rank's shard of the layout
  uint64_t padded_numel = 0;                // elements of the flat buffers (>= layout numel)
  torch::Dtype dtype = torch::kFloat32;     // of the working parameters and the backward's gradients
  // Of the gradients the stage reduces and the update reads: dtype, or float32 under
  // train.grad_accum_dtype = "float32" (grad_accumulation.hpp).
  torch::Dtype grad_dtype = torch::kFloat32;
  zf_tier param_tier = ZF_TIER_DEVICE;      // where the working parameters live
  std::unique_ptr<UpdatePlan> update;
  std::unique_ptr<Residency> residency;        // blocks gathered around their use (ZeRO-3, cpu_full)
  std::unique_ptr<ShardedGradients> grad_shards;  // only under a stage that reduces per block
  std::unique_ptr<Fp32GradAccumulation> accumulation;  // fp32 gradients of whole-gradient stages, else null
  bool defer_update = false;  // the next forward may overlap the end of the update (UpdatePlan::finish)
  MemoryPlan memory_plan;

  uint64_t shard_numel() const { return shard_end - shard_begin; }
  // The update's facts for summary.json, the most any rank's host memory peak (VmHWM) grew while its
  // parameters were placed (before the optimizer's state: parameters_host_peak_growth_bytes), and
  // with model.init_from the checkpoint's bytes the ranks read for their parameters
  // (init_from_bytes_read: all ranks; _max_rank: the rank that read most).
  std::vector<std::pair<std::string, double>> facts() const;
  zf_tier model_tier() const;  // of the model's buffers: the GPU, or host memory on a CPU run
  // This rank's shard of the working parameters and of the (reduced) gradients, wherever they live.
  torch::Tensor params_shard() const;
  torch::Tensor grads_shard() const;
  // The L2 norm of the gradients summed over ranks (a collective), each element counted once
  // however many ranks own it.
  double global_grad_norm() const;
  // What the stage plugin sees of micro-step `micro` of `step`.
  zf_step_buffers buffers(int64_t step, uint32_t micro) const;

 private:
  void check_memory(uint64_t numel, const PluginSet &plugins, bool sharded, const std::vector<uint8_t> &resident,
                    uint64_t prefetch_numel, const MicroBatchMemory &micro);

  void note_setup(const RunConfig &config, uint64_t bytes_read, bool sharded, uint64_t host_growth);

  std::vector<std::pair<std::string, double>> setup_facts_;  // note_setup's
  const RunOptions &options_;
  Runtime &runtime_;
  FlatBuffers &flat_;
};

}  // namespace zf
