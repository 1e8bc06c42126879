#include "plugin/plugin_kinds.hpp"

#include "plugin/api_copy.hpp"
#include "plugin/plugin_entry.hpp"
#include "runtime/error.hpp"
#include "runtime/tensors.hpp"


namespace zf {

namespace {

template <class Api>
Api api_of(const PluginInstance &instance) {
  return api_copy<Api>(instance.api<Api>());
}

}  // namespace

template <class Entry, class... Args>
zf_status PluginOfKind::call(const char *entry, Entry fn, bool allow_declined, Args... args) const {
  const PluginInstance &instance = *live_.instance;
  zf_error error{};
  const PluginEntry running(instance, entry);
  zf_status status = fn(instance.object(), args..., &error);
  if (status != ZF_DECLINED || !allow_declined) instance.check(status, error, entry);
  return status;
}

// ---- Stage ----

StagePlugin::StagePlugin(LivePlugin live) : PluginOfKind(std::move(live)) {
  api_ = api_of<zf_stage_api>(instance());
  hooks_[kBeforeForward] = api_.before_forward;
  hooks_[kAfterForward] = api_.after_forward;
  hooks_[kBeforeBackward] = api_.before_backward;
  hooks_[kAfterBackward] = api_.after_backward;
  gathers_from_master_ = ZF_ABI_MINOR_OF(file().abi_version) >= 6;
}

zf_stage_plan StagePlugin::plan(const zf_layout &layout, std::vector<uint8_t> &block_resident) const {
  zf_stage_plan plan{};
  plan.struct_size = sizeof plan;
  block_resident.assign(layout.block_count, 1);
  plan.block_resident = block_resident.data();
  call("plan", api_.plan, false, &layout, &plan);
  return plan;
}

void StagePlugin::hook(Hook which, uint32_t block, const zf_step_buffers &buffers) const {
  static const char *const names[] = {"before_forward", "after_forward", "before_backward", "after_backward"};
  if (hooks_[which]) call(names[which], hooks_[which], false, block, &buffers);
}

void StagePlugin::reduce_gradients(const zf_step_buffers &buffers) const {
  call("reduce_gradients", api_.reduce_gradients, false, &buffers);
}

void StagePlugin::gather_parameters(const zf_step_buffers &buffers) const {
  if (api_.gather_parameters) call("gather_parameters", api_.gather_parameters, false, &buffers);
}

void StagePlugin::gather_block(uint32_t block, const zf_step_buffers &buffers) const {
  call("gather_block", api_.gather_block, false, block, &buffers);
}

void StagePlugin::reduce_block(uint32_t block, const zf_step_buffers &buffers) const {
  call("reduce_block", api_.reduce_block, false, block, &buffers);
}

// ---- Offload ----

OffloadPlugin::OffloadPlugin(LivePlugin live) : PluginOfKind(std::move(live)) {
  api_ = api_of<zf_offload_api>(instance());
}

zf_offload_plan OffloadPlugin::plan(const zf_layout &layout, uint64_t shard_numel, zf_tier model_tier) const {
  zf_offload_plan tiers{};
  tiers.struct_size = sizeof tiers;
  tiers.param_out_tier = model_tier;
  tiers.param_tier = model_tier;
  tiers.host_ratio = 1;
  call("plan", api_.plan, false, &layout, shard_numel, &tiers);
  ZF_REQUIRE(tiers.host_ratio >= 0 && tiers.host_ratio <= 1,
             "offload plugin '%s' planned host_ratio = %g: expected a share from 0 to 1", name(), tiers.host_ratio);
  return tiers;
}

void OffloadPlugin::gradients_out(zf_tensor_view from, zf_tensor_view to, void *stream) const {
  call("gradients_out", api_.gradients_out, false, from, to, stream);
}

void OffloadPlugin::parameters_in(zf_tensor_view from, zf_tensor_view to, void *stream) const {
  call("parameters_in", api_.parameters_in, false, from, to, stream);
}

void *OffloadPlugin::transfers_done(int32_t direction) const {
  void *event = nullptr;
  if (api_.transfer_event) call("transfer_event", api_.transfer_event, false, direction, &event);
  else wait();
  return event;
}

void OffloadPlugin::write_tile(uint32_t tensor, uint64_t offset, const void *source, uint64_t bytes) const {
  call("write_tile", api_.write_tile, false, tensor, offset, source, bytes);
}

void OffloadPlugin::read_tile(uint32_t tensor, uint64_t offset, void *destination, uint64_t bytes) const {
  call("read_tile", api_.read_tile, false, tensor, offset, destination, bytes);
}

void OffloadPlugin::wait() const {
  if (api_.wait) call("wait", api_.wait, false);
}

// ---- Optimizer ----

OptimizerPlugin::OptimizerPlugin(LivePlugin live) : PluginOfKind(std::move(live)) {
  api_ = api_of<zf_optimizer_api>(instance());
  if (!api_.state_spec || !api_.bind_state) return;
  for (uint32_t index = 0;; ++index) {
    const char *name = nullptr;
    zf_dtype dtype = ZF_DTYPE_F32;
    if (call("state_spec", api_.state_spec, true, index, &name, &dtype) == ZF_DECLINED) break;
    specs_.push_back(StateSpec{name, torch_dtype(dtype)});
  }
}

void OptimizerPlugin::init_state(uint64_t numel) const { call("init_state", api_.init_state, false, numel); }

void OptimizerPlugin::bind_state(uint64_t numel, const std::vector<zf_tensor_view> &state) const {
  call("bind_state", api_.bind_state, false, numel, state.data(), uint32_t(state.size()));
}

void OptimizerPlugin::step(const zf_optimizer_step_args &args) const { call("step", api_.step, false, &args); }

std::vector<std::pair<std::string, zf_tensor_view>> OptimizerPlugin::own_state() const {
  std::vector<std::pair<std::string, zf_tensor_view>> out;
  for (uint32_t index = 0;; ++index) {
    const char *name = nullptr;
    zf_tensor_view view{};
    if (call("state_tensor", api_.state_tensor, true, index, &name, &view) == ZF_DECLINED) break;
    out.emplace_back(name, view);
  }
  return out;
}

std::vector<std::string> OptimizerPlugin::state_names() const {
  std::vector<std::string> names;
  for (const StateSpec &spec : specs_) names.push_back(spec.name);
  if (names.empty())
    for (const auto &entry : own_state()) names.push_back(entry.first);
  return names;
}

// ---- Selector ----

SelectorPlugin::SelectorPlugin(LivePlugin live) : PluginOfKind(std::move(live)) {
  api_ = api_of<zf_selector_api>(instance());
}

void SelectorPlugin::score(const zf_select_args &args, zf_tensor_view scores) const {
  if (api_.score) call("score", api_.score, false, &args, scores);
}

void SelectorPlugin::select(const zf_select_args &args, zf_tensor_view scores, zf_tensor_view mask) const {
  call("select", api_.select, false, &args, scores, mask);
}

}  // namespace zf
