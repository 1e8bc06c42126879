// update_schedule.hpp: when which elements of the shard are updated. The update plan's step
// protocol (update_plan.hpp) calls its schedule: EveryStep updates the whole shard every step,
// where the model computes or on the host (HostUpdate); ZenFlow (zenflow.hpp) updates the selected
// columns every step and the others on the host across steps.
#pragma once

#include "update/host_update.hpp"

#include <string>
#include <utility>
#include <vector>

namespace zf {

// One step's tensors: this rank's working parameters and reduced gradients (compute dtype, on
// the model's tier), and the gradient scale when it is known before the backward.
struct StepTensors {
  int64_t step = 0;
  torch::Tensor params, grads;
  bool scale_known = true;
  float grad_scale = 1;
};

// A ZenFlow checkpoint of another layout (engine/resume_layout.hpp): the writer's staggered groups,
// each cut to this rank's shard, with what they summed since their last CPU update. The next step
// applies what they owe, as the writer's next step would have (zenflow_inherit.cpp).
struct WriterGroup {
  uint64_t begin = 0, end = 0;      // this rank's shard elements
  int64_t summed = 0, updates = 0;  // steps summed since its last CPU update; its CPU updates so far
  double weight = 0;                // what the summed gradients weigh together (zenflow.correction)
  bool waiting = false;             // its last CPU update's result waits in zenflow.staging
  torch::Tensor staged;             // waiting: that result, read from the writer's zenflow.staging (host)
};
struct InheritedSchedule {
  std::vector<WriterGroup> groups;
  int64_t next_group = 0;         // the writer's group handed over next
  bool last_cpu_carried = false;  // zenflow.last_cpu_update was read from the checkpoint (lookahead)
};

class UpdateSchedule {
 public:
  virtual ~UpdateSchedule() = default;
  virtual void add_planned(std::vector<PlannedBuffer> &) const {}
  virtual void allocate() {}
  virtual void begin(const StepTensors &step) = 0;  // before the backward
  // Layout elements [begin, end) of gradients are final; `stream` has the work that made them so.
  virtual void gradients_final(uint64_t begin, uint64_t end, void *stream) = 0;
  // mean_scale: 1 / (ranks * micro-steps); clip: the clipping factor; defer: the update may go
  // on while the next forward runs (ready_for orders each block after its parameters).
  virtual void finish(float mean_scale, float clip, bool defer) = 0;
  virtual void ready_for(uint64_t begin, uint64_t end) = 0;
  virtual void forward_launched() {}  // the training thread has issued the step's first forward
  virtual void finish_step() = 0;  // the step's own update is complete
  virtual void complete() = 0;     // after the last step: every gradient applied
  // Checkpoints: what the schedule adds to the optimizer's state, and setting it back.
  virtual std::vector<std::pair<std::string, torch::Tensor>> state() { return {}; }
  virtual std::vector<std::string> optional_state() const { return {}; }  // names a checkpoint may lack
  virtual void restore(const torch::Tensor &params_shard) = 0;
  virtual void inherit(InheritedSchedule) {}  // before restore
  // After restore: the shard elements [begin, end) whose CPU update's result the checkpoint's
  // zenflow.staging holds from its first element ({0, 0}: none waits).
  virtual std::pair<uint64_t, uint64_t> waiting() const { return {0, 0}; }
  virtual std::string events() const { return {}; }  // what the update did in the step just finished
  virtual std::vector<std::pair<std::string, double>> facts() const { return {}; }
  virtual double selected_fraction() const { return 0; }
};

// The whole shard every step: the optimizer on the model's device, or (host != NULL) on the host,
// bucket by bucket as gradients become final when the offload plugin overlaps.
class EveryStep : public UpdateSchedule {
 public:
  // host_steps: a counter that numbers the optimizer's steps instead of the training step
  // (ZenFlow's warm-up steps share the CPU optimizer's count with its later CPU updates).
  // host_from: the host updates shard elements [host_from, numel) (a split update: the schedule
  // below updates the rest beside it, update_beside).
  EveryStep(UpdateBuffers &buffers, HostUpdate *host, int64_t *host_steps = nullptr, uint64_t host_from = 0);
  void begin(const StepTensors &step) override;
  void gradients_final(uint64_t begin, uint64_t end, void *stream) override;
  void finish(float mean_scale, float clip, bool defer) override;
  void ready_for(uint64_t begin, uint64_t end) override;
  void finish_step() override;
  void complete() override;
  void restore(const torch::Tensor &params_shard) override;

 protected:
  // An offloaded step's other work, after its host part is handed over and before it is waited for.
  virtual void update_beside(float) {}
  const StepTensors &step() const { return step_; }
  void drain_host();
  void set_host_from(uint64_t host_from);  // a split chosen after the first step

  UpdateBuffers &buffers_;

 private:
  void update_on_device(float grad_scale);
  // The working parameters are the master itself (zero3 gathering from it): nothing to copy.
  bool params_are_master(const torch::Tensor &params) const {
    return params.data_ptr() == buffers_.master.data_ptr();
  }

  HostUpdate *host_;
  int64_t *host_steps_;
  uint64_t host_from_;
  std::vector<zf_optimizer_range> host_ranges_;  // the job's ranges inside [host_from, numel)
  StepTensors step_;
};

}  // namespace zf
