// split_update.hpp: partial offload (offload.ratio < 1, DeepSpeed's ZeRO-Offload++). The first
// device_part elements of the shard keep an fp32 master and optimizer state where the model
// computes and are updated there every step, on the compute stream after the backward; the rest is
// the offloaded update of every step (EveryStep over [device_part, numel)), which runs beside it
// on the update thread.
// The device part's master and state go back into the host's before a checkpoint and at the end of
// the run, so that checkpoints, param_digest and the export read one master, as without the split.
#pragma once

#include "update/update_schedule.hpp"

#include <string>
#include <utility>
#include <vector>

namespace zf {

class SplitUpdate : public EveryStep {
 public:
  SplitUpdate(UpdateBuffers &buffers, HostUpdate &host);
  void add_planned(std::vector<PlannedBuffer> &planned) const override;
  void allocate() override;
  void complete() override;
  // Writes the device part into the host's master and state (which the checkpoint holds); adds nothing.
  std::vector<std::pair<std::string, torch::Tensor>> state() override;
  void restore(const torch::Tensor &params_shard) override;

 private:
  void update_beside(float grad_scale) override;  // the device part, on the compute stream
  void move_state(bool to_host);  // the device part's master and state, to the host's or from it

  const OptimizerPlugin &optimizer_;  // the device part's (plugins.device_optimizer())
  const uint64_t part_;               // elements [0, part_) of the shard
  const std::vector<zf_optimizer_range> device_ranges_;
  std::vector<StateSpec> specs_;    // the device optimizer's state ...
  std::vector<size_t> host_state_;  // ... and the host's tensor of each
  torch::Tensor master_;            // the device part's fp32 master, on the model's tier
  std::vector<torch::Tensor> state_;
};

}  // namespace zf
