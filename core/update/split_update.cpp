#include "update/split_update.hpp"

#include "runtime/error.hpp"
#include "runtime/tensors.hpp"
#include "update/device_room.hpp"
#include "update/disk_state.hpp"

#include <cstdio>

namespace zf {

SplitUpdate::SplitUpdate(UpdateBuffers &buffers, HostUpdate &host)
    : EveryStep(buffers, &host, /*host_steps=*/nullptr, /*host_from=*/buffers.device_part),
      optimizer_(buffers.plugins.device_optimizer()), auto_(buffers.split_auto), part_(buffers.device_part) {
  host_state_ = buffers_.held_state_of(optimizer_, "offload.ratio < 1 moves the device part's optimizer state");
  specs_ = optimizer_.state_specs();
  if (auto_) chosen_ = torch::full({1}, -1.0, torch::kFloat64);
}

// "auto" plans nothing: its device part fits, by its choice, in what the first step left.
void SplitUpdate::add_planned(std::vector<PlannedBuffer> &planned) const {
  if (auto_) return;
  planned.push_back({buffers_.model_tier, "master (device part)", part_ * 4});
  for (const StateSpec &spec : specs_)
    planned.push_back({buffers_.model_tier, format("%s.%s (device part)", optimizer_.name(), spec.name.c_str()),
                       part_ * c10::elementSize(spec.dtype)});
}

void SplitUpdate::allocate() {
  if (!auto_) use_part(part_);
}

void SplitUpdate::use_part(uint64_t part) {
  part_ = part;
  device_ranges_ = clip_ranges(buffers_.job.ranges, 0, part);
  set_host_from(part);
  if (part == 0) return;
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

// The elements of the shard whose fp32 master and state fit what the first step left, as a share
// of the shard the same on every rank (the smallest).
void SplitUpdate::choose_part() {
  drain_host();  // the first step's host update has written the master and state the part starts from
  const DeviceRoom room = device_room(buffers_.runtime, buffers_.model_tier);
  const uint64_t element = master_and_state_bytes(specs_);
  double share = 0;  // of the shard, where the model computes
  std::string why = "a CPU run without run.device_memory_limit_gb: all of it on the host, as offload.ratio = 1";
  if (room.known) {
    share = room.share(element, buffers_.numel());
    why = format("%s; the master and state need %llu bytes an element", room.why.c_str(), (unsigned long long)element);
  }
  Communicator &comm = *buffers_.runtime.comm;
  const double ratio = 1 - smallest_over_ranks(comm, share);
  chosen_.data_ptr<double>()[0] = ratio;
  use_part(device_part_of(buffers_.numel(), ratio));
  if (comm.rank() == 0) {
    std::printf("zfcore: offload.ratio = auto chose %.4g%s (rank 0: %s)\n", ratio,
                ratio <= 0 ? ": every element is updated where the model computes, as without offload" : "",
                why.c_str());
    std::fflush(stdout);
  }
}

void SplitUpdate::begin(const StepTensors &step) {
  if (auto_ && begun_ && chosen_.data_ptr<double>()[0] < 0) choose_part();
  begun_ = true;
  EveryStep::begin(step);
}

void SplitUpdate::update_beside(float grad_scale) {
  if (part_ == 0) return;
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
  if (!auto_) return {};
  return {{"offload.ratio", chosen_}};
}

// A checkpoint of a run with a fixed ratio has no choice: "auto" then chooses after the first step.
std::vector<std::string> SplitUpdate::optional_state() const {
  if (!auto_) return {};
  return {"offload.ratio"};
}

void SplitUpdate::restore(const torch::Tensor &params_shard) {
  if (auto_ && part_ == 0 && chosen_.data_ptr<double>()[0] >= 0) {
    use_part(device_part_of(buffers_.numel(), chosen_.data_ptr<double>()[0]));  // moves the state there
  } else {
    move_state(/*to_host=*/false);
  }
  EveryStep::restore(params_shard);
}

std::vector<std::pair<std::string, double>> SplitUpdate::facts() const {
  if (auto_ && chosen_.data_ptr<double>()[0] < 0) return {};
  return {{"offload_ratio", host_ratio()}};
}

void SplitUpdate::move_state(bool to_host) {
  if (part_ == 0) return;
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
