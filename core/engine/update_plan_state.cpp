// update_plan_state.cpp: the update plan's state for checkpoints: what is saved (the optimizer's
// state, ZenFlow's, or tiles on disk) and what a loaded checkpoint sets back.
#include "engine/update_plan.hpp"

#include "engine/disk_state.hpp"
#include "engine/flat_buffers.hpp"
#include "engine/zenflow.hpp"
#include "plugin/plugin_entry.hpp"
#include "runtime/error.hpp"

namespace zf {

void UpdatePlan::restore(const torch::Tensor &params_shard) {
  torch::NoGradGuard no_grad;
  if (zenflow_) return zenflow_->restore(params_shard);
  if (!params_are_master(params_shard)) params_shard.copy_(master);
}

std::vector<std::pair<std::string, torch::Tensor>> UpdatePlan::state_tensors() {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  auto &optimizer = *plugins_.optimizer.instance;
  auto state_tensor = optimizer.api<zf_optimizer_api>()->state_tensor;
  ZF_REQUIRE(state_tensor != nullptr || !state_.empty(),
             "optimizer plugin '%s' exposes no state (state_tensor), so it cannot be checkpointed", optimizer.name());
  if (!state_.empty()) {
    std::vector<std::pair<std::string, torch::Tensor>> zenflow;
    if (zenflow_) zenflow = zenflow_->state();  // first: the device's columns go into the host state
    if (!disk_)  // else state_pieces()
      for (size_t i = 0; i < state_.size(); ++i) out.emplace_back(state_specs_[i].name, state_[i]);
    for (auto &entry : zenflow) out.push_back(std::move(entry));
    return out;
  }
  for (uint32_t index = 0;; ++index) {
    const char *name = nullptr;
    zf_tensor_view view{};
    zf_error error{};
    const PluginEntry running(optimizer, "state_tensor");
    zf_status status = state_tensor(optimizer.object(), index, &name, &view, &error);
    if (status == ZF_DECLINED) break;
    optimizer.check(status, error, "state_tensor");
    out.emplace_back(name, tensor_of(view));
  }
  return out;
}

std::vector<TensorPieces> UpdatePlan::state_pieces() {
  if (!disk_) return {};
  disk_->flush();
  return disk_->pieces();
}

}  // namespace zf
