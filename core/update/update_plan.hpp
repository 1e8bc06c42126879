// update_plan.hpp: the update of this rank's shard after the backward. The buffers
// (update_buffers.hpp) are placed by the offload plugin; the optimizer runs over the shard where
// the model computes (no offload: on the training thread) or on the host (offload, host_update.hpp);
// the schedule (update_schedule.hpp) decides when which elements are updated: the whole shard
// every step, or ZenFlow's split with a [zenflow] table.
//
// Step protocol (training thread): begin() before the backward, then gradients_final() for ranges
// of the shard whose gradients are final (during the last micro-step's backward, when the plan
// overlaps), then finish() after the backward, which hands over what is left. finish() either
// waits for the whole update, or (defer = true) returns at once: the update thread goes on in
// forward order (the embedding, whose gradients are final last, first) while the next forward
// runs, and before each block's forward ready_for() makes the compute stream wait for that block's
// new parameters. drain() completes a deferred update; anything that reads the master or all
// parameters (checkpoints, evaluation, export, the next backward) drains first.
#pragma once

#include "update/update_schedule.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zf {

struct ZenFlowOptions;

class UpdatePlan {
 public:
  UpdatePlan(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end,
             torch::Dtype dtype, zf_tier model_tier, const OptimizerSettings &settings,
             const ZenFlowOptions &zenflow, torch::Dtype grad_dtype = torch::ScalarType::Undefined);
  ~UpdatePlan();
  UpdatePlan(const UpdatePlan &) = delete;
  UpdatePlan &operator=(const UpdatePlan &) = delete;

  // What allocate() will hold, per tier and tag.
  const std::vector<PlannedBuffer> &planned() const { return planned_; }
  // Allocates the buffers and binds the optimizer's state; master starts from params_shard.
  void allocate(const torch::Tensor &params_shard);

  const torch::Tensor &master() const { return buffers_.master; }  // fp32, on the master tier
  const UpdateJob &job() const { return buffers_.job; }
  bool offloaded() const { return buffers_.offloaded; }
  // Where the working parameters live (the model's tier, or host memory under parameter offload),
  // and how many elements of the next blocks to copy ahead from there.
  zf_tier param_tier() const { return buffers_.tiers.param_tier; }
  uint64_t param_prefetch() const { return buffers_.tiers.prefetch_numel; }

  // The step protocol above. grad_scale is known at begin unless clipping needs the global norm
  // first (then scale_known = false, and finish has it).
  void begin(int64_t step, double lr, const torch::Tensor &params_shard, const torch::Tensor &grads_shard,
             bool scale_known, float grad_scale);
  void gradients_final(uint64_t begin, uint64_t end, void *stream) { schedule_->gradients_final(begin, end, stream); }
  void finish(float mean_scale, float clip, bool defer) { schedule_->finish(mean_scale, clip, defer); }
  void ready_for(uint64_t begin, uint64_t end) { schedule_->ready_for(begin, end); }
  void forward_launched() { schedule_->forward_launched(); }
  void drain();
  // Completes the step's own update (ZenFlow's CPU update, which runs across steps, goes on).
  void finish_step() { schedule_->finish_step(); }
  // After the last step: every gradient of the run applied to the master and working parameters.
  void complete() { schedule_->complete(); }

  // The state for checkpoints (name, tensor), after a drain; the schedule's included.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors();
  // Names among them that a checkpoint may lack (an "auto" choice, made again after a resume).
  std::vector<std::string> optional_state() const { return schedule_->optional_state(); }
  // ... and the state on disk, read and written tile by tile (empty unless it is on disk).
  std::vector<TensorPieces> state_pieces();
  // After a checkpoint was loaded into state_tensors(): make the working parameters match it.
  void restore(const torch::Tensor &params_shard) { schedule_->restore(params_shard); }
  // Before restore, for a ZenFlow checkpoint of another layout: the writer's groups (update_schedule.hpp).
  void inherit(InheritedSchedule schedule) { schedule_->inherit(std::move(schedule)); }
  std::pair<uint64_t, uint64_t> waiting() const { return schedule_->waiting(); }  // after restore

  // What the update did in the step just finished ("" without ZenFlow; else e.g. "select,gpu,cpu").
  std::string events() const { return schedule_->events(); }
  // Counters for summary.json: bytes copied down and up, ZenFlow's CPU updates and selections.
  std::vector<std::pair<std::string, double>> facts() const;
  double selected_fraction() const { return schedule_->selected_fraction(); }

 private:
  UpdateBuffers buffers_;
  std::vector<PlannedBuffer> planned_;
  std::unique_ptr<HostUpdate> host_;  // offload: after buffers_ (its thread is joined first)
  std::unique_ptr<UpdateSchedule> schedule_;
};

}  // namespace zf
