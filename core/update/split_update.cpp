#include "update/split_update.hpp"

#include "runtime/error.hpp"
#include "runtime/tensors.hpp"
#include "update/disk_state.hpp"

namespace zf {

SplitUpdate::SplitUpdate(UpdateBuffers &buffers, HostUpdate &host)
    : EveryStep(buffers, &host, /*host_steps=*/nullptr, /*host_from=*/buffers.device_part),
      optimizer_(buffers.plugins.device_optimizer()), part_(buffers.device_part),
      device_ranges_(clip_ranges(buffers.job.ranges, 0, buffers.device_part)) {
  host_state_ = buffers_.held_state_of(optimizer_, "offload.ratio < 1 moves the device part's optimizer state");
  specs_ = optimizer_.state_specs();
}

void SplitUpdate::add_planned(std::vector<PlannedBuffer> &planned) const {
  planned.push_back({buffers_.model_tier, "master (device part)", part_ * 4});
  for (const StateSpec &spec : specs_)
    planned.push_back({buffers_.model_tier, format("%s.%s (device part)", optimizer_.name(), spec.name.c_str()),
                       part_ * c10::elementSize(spec.dtype)});
}

void SplitUpdate::allocate() {
  MemoryLedger &ledger = buffers_.runtime.memory;
  master_ = ledger_tensor(ledger, buffers_.model_tier, part_, torch::kFloat32, "master (device part)", false);
  std::vector<zf_tensor_view> views;
  for (const StateSpec &spec : specs_) {
    state_.push_back(ledger_tensor(ledger, buffers_.model_tier, part_, spec.dtype,
                                   format("%s.%s (device part)", optimizer_.name(), spec.name.c_str()), false));
    views.push_back(view_of(state_.back()));
  }
  optimizer_.bind_state(part_, views);
  move_state(/*to_host=*/false);  // the master, and the state the host's optimizer started from
}

void SplitUpdate::update_beside(float grad_scale) {
  const torch::Tensor params = step().params.narrow(0, 0, int64_t(part_));
  zf_optimizer_step_args args =
      optimizer_step_args(device_ranges_.data(), device_ranges_.size(), buffers_.groups.data(), buffers_.groups.size(),
                          step().step, grad_scale, view_of(master_), view_of(step().grads.narrow(0, 0, int64_t(part_))));
  args.stream = buffers_.runtime.compute_stream;
  const bool writes_params = buffers_.dtype != torch::kFloat32;  // checked: the optimizer can
  if (writes_params) args.params_out = view_of(params);
  optimizer_.step(args);
  if (!writes_params) {
    torch::NoGradGuard no_grad;
    params.copy_(master_);
  }
}

void SplitUpdate::complete() {
  EveryStep::complete();
  move_state(/*to_host=*/true);
}

std::vector<std::pair<std::string, torch::Tensor>> SplitUpdate::state() {
  move_state(/*to_host=*/true);
  return {};
}

void SplitUpdate::restore(const torch::Tensor &params_shard) {
  move_state(/*to_host=*/false);
  EveryStep::restore(params_shard);
}

void SplitUpdate::move_state(bool to_host) {
  torch::NoGradGuard no_grad;
  const int64_t n = int64_t(part_);
  torch::Tensor host_master = buffers_.master.narrow(0, 0, n);
  if (to_host) host_master.copy_(master_);
  else master_.copy_(host_master);
  const std::vector<zf_optimizer_range> part{{0, part_, 0, 0}};
  for (size_t i = 0; i < state_.size(); ++i) {
    const size_t held = host_state_[i];
    if (!buffers_.disk) {
      torch::Tensor host = buffers_.state[held].narrow(0, 0, n);
      if (to_host) host.copy_(state_[i]);
      else state_[i].copy_(host);
      continue;
    }
    // On disk: through a host buffer of the held dtype.
    torch::Tensor values = torch::empty({n}, torch::TensorOptions().dtype(buffers_.state_specs[held].dtype));
    if (to_host) values.copy_(state_[i]);
    buffers_.disk->copy_ranges(held, part, values.data_ptr(), /*to_disk=*/to_host);
    if (!to_host) state_[i].copy_(values);
  }
}

}  // namespace zf
