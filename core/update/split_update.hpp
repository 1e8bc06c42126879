// split_update.hpp: partial offload (offload.ratio < 1, DeepSpeed's ZeRO-Offload++). The first
// device_part elements of the shard keep an fp32 master and optimizer state where the model
// computes and are updated there every step, on the compute stream after the backward; the rest is
// the offloaded update of every step (EveryStep over [device_part, numel)), which runs beside it
// on the update thread.
// offload.ratio = "auto": the host updates the whole shard in the first step; before the second,
// the device part becomes the elements whose master and state fit the memory that step left
// (device_room.hpp), the same share on every rank, kept in checkpoints.
// The device part's master and state go back into the host's before a checkpoint and at the end of
// the run, so that checkpoints, param_digest and the export read one master, as without the split.
#pragma once

#include "update/update_schedule.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class SplitUpdate : public EveryStep {
 public:
  SplitUpdate(UpdateBuffers &buffers, HostUpdate &host);
  void add_planned(std::vector<PlannedBuffer> &planned) const override;
  void allocate() override;
  void begin(const StepTensors &step) override;
  void complete() override;
  // Writes the device part into the host's master and state (which the checkpoint holds); adds
  // the chosen share under "auto".
  std::vector<std::pair<std::string, torch::Tensor>> state() override;
  std::vector<std::string> optional_state() const override;
  void restore(const torch::Tensor &params_shard) override;
  std::vector<std::pair<std::string, double>> facts() const override;

 private:
  void update_beside(float grad_scale) override;  // the device part, on the compute stream
  void choose_part();                             // offload.ratio = "auto"
  void use_part(uint64_t part);  // allocates the device part's master and state and moves them there
  void move_state(bool to_host);  // the device part's master and state, to the host's or from it
  double host_ratio() const { return 1 - double(part_) / double(std::max<uint64_t>(1, buffers_.numel())); }

  const OptimizerPlugin &optimizer_;  // the device part's (plugins.device_optimizer())
  const bool auto_;                   // offload.ratio = "auto"
  uint64_t part_ = 0;                 // elements [0, part_) of the shard
  std::vector<zf_optimizer_range> device_ranges_;  // the job's ranges inside [0, part_), set by use_part
  std::vector<StateSpec> specs_;    // the device optimizer's state ...
  std::vector<size_t> host_state_;  // ... and the host's tensor of each
  torch::Tensor master_;            // the device part's fp32 master, on the model's tier
  std::vector<torch::Tensor> state_;
  bool begun_ = false;     // a step of this process has begun ("auto" chooses before the second)
  torch::Tensor chosen_;   // "auto": the host's share chosen (float64; -1 until chosen), in checkpoints
};

}  // namespace zf
