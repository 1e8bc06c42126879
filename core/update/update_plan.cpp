#include "update/update_plan.hpp"

#include "update/disk_state.hpp"
#include "update/split_update.hpp"
#include "update/zenflow.hpp"
#include "runtime/error.hpp"

namespace zf {

UpdatePlan::UpdatePlan(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin,
                       uint64_t shard_end, torch::Dtype dtype, zf_tier model_tier, const OptimizerSettings &settings,
                       const ZenFlowOptions &zenflow, torch::Dtype grad_dtype)
    : buffers_(runtime, plugins, layout, shard_begin, shard_end, dtype, model_tier, settings, grad_dtype) {
  planned_ = buffers_.planned;
  if (buffers_.offloaded) host_ = std::make_unique<HostUpdate>(buffers_, buffers_.job.overlapped || zenflow.enabled);
  const bool split = buffers_.device_part > 0 || buffers_.split_auto;
  ZF_REQUIRE(!zenflow.enabled || !split,
             "offload.ratio = %s and [zenflow] both choose what the device updates: ZenFlow keeps the selected "
             "columns there, so leave offload.ratio at 1 with [zenflow]", buffers_.ratio_text().c_str());
  if (zenflow.enabled) schedule_ = std::make_unique<ZenFlow>(buffers_, host_.get(), layout, zenflow);
  else if (split) schedule_ = std::make_unique<SplitUpdate>(buffers_, *host_);
  else schedule_ = std::make_unique<EveryStep>(buffers_, host_.get());
  schedule_->add_planned(planned_);
}

UpdatePlan::~UpdatePlan() = default;

void UpdatePlan::allocate(const torch::Tensor &params_shard) {
  buffers_.allocate(params_shard);
  schedule_->allocate();
}

void UpdatePlan::begin(int64_t step, double lr, const torch::Tensor &params_shard, const torch::Tensor &grads_shard,
                       bool scale_known, float grad_scale) {
  for (zf_optimizer_group &group : buffers_.groups) group.lr = float(lr);
  schedule_->begin(StepTensors{step, params_shard, grads_shard, scale_known, grad_scale});
}

void UpdatePlan::drain() {
  if (host_) host_->drain();
}

std::vector<std::pair<std::string, torch::Tensor>> UpdatePlan::state_tensors() {
  std::vector<std::pair<std::string, torch::Tensor>> scheduled = schedule_->state();  // first: ZenFlow's
  std::vector<std::pair<std::string, torch::Tensor>> out = buffers_.optimizer_state();  // columns go home
  for (auto &entry : scheduled) out.push_back(std::move(entry));
  return out;
}

std::vector<TensorPieces> UpdatePlan::state_pieces() {
  if (!buffers_.disk) return {};
  buffers_.disk->flush();
  return buffers_.disk->pieces();
}

std::vector<std::pair<std::string, double>> UpdatePlan::facts() const {
  std::vector<std::pair<std::string, double>> out = {{"offload_bytes_down", double(host_ ? host_->bytes_down() : 0)},
                                                     {"offload_bytes_up", double(host_ ? host_->bytes_up() : 0)},
                                                     {"host_update_bytes", double(host_ ? host_->bytes_streamed() : 0)}};
  if (buffers_.disk) {
    out.emplace_back("nvme_bytes_read", double(buffers_.disk->bytes_read()));
    out.emplace_back("nvme_bytes_written", double(buffers_.disk->bytes_written()));
  }
  for (const auto &fact : schedule_->facts()) out.push_back(fact);
  return out;
}

}  // namespace zf
