// plugin_kinds.hpp: the typed face of each plugin kind (stage, offload, optimizer, selector).
// Each class owns one live plugin and its config, makes every call through its entries (the
// fatal-signal note, the error turned into a zf::Error that names plugin and entry), and
// normalises what older ABI minor versions lack once, at construction (sdk/CHANGELOG.md): an
// entry a plugin does not have is NULL here, and each class says what that means. Nothing above
// this layer reads a raw entry or an ABI version.
#pragma once

#include "plugin/plugin_instance.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

namespace zf {

// A live plugin and the config it was created with (which must outlive it).
struct LivePlugin {
  std::unique_ptr<PluginConfig> config;
  std::unique_ptr<PluginInstance> instance;
};

// What all four kinds share: the plugin's name, file and capabilities.
class PluginOfKind {
 public:
  explicit PluginOfKind(LivePlugin live) : live_(std::move(live)) {}
  const char *name() const { return live_.instance->name(); }
  const PluginFile &file() const { return live_.instance->file(); }
  bool has(uint64_t capability) const { return (file().descriptor->capabilities & capability) != 0; }
  const PluginInstance &instance() const { return *live_.instance; }
  const PluginConfig &config() const { return *live_.config; }

 protected:
  // Calls entry `entry` (a member of the plugin's api) with the plugin's object, `args` and an
  // error slot; a status other than ZF_OK becomes a zf::Error. Returns the status (ZF_DECLINED
  // passes when allow_declined).
  template <class Entry, class... Args>
  zf_status call(const char *entry, Entry fn, bool allow_declined, Args... args) const;

  LivePlugin live_;
};

class StagePlugin : public PluginOfKind {
 public:
  explicit StagePlugin(LivePlugin live);
  enum Hook { kBeforeForward, kAfterForward, kBeforeBackward, kAfterBackward };
  zf_stage_plan plan(const zf_layout &layout, std::vector<uint8_t> &block_resident) const;
  bool has_hook(Hook hook) const { return hooks_[hook] != nullptr; }
  void hook(Hook hook, uint32_t block, const zf_step_buffers &buffers) const;  // nothing when absent
  void reduce_gradients(const zf_step_buffers &buffers) const;
  bool gathers_parameters() const { return api_.gather_parameters != nullptr; }
  void gather_parameters(const zf_step_buffers &buffers) const;  // nothing when absent
  void gather_block(uint32_t block, const zf_step_buffers &buffers) const;
  bool reduces_blocks() const { return api_.reduce_block != nullptr; }  // sharded gradients (ZeRO-2, -3)
  void reduce_block(uint32_t block, const zf_step_buffers &buffers) const;
  bool shards_parameters() const { return has(ZF_CAP_SHARD_PARAMETERS); }
  // ABI 1.6: gather_block converts from an fp32 shard (the master), so no compute-precision copy
  // of the shard is needed.
  bool gathers_from_master() const { return gathers_from_master_; }

 private:
  zf_stage_api api_{};
  using HookEntry = zf_status (*)(zf_object *, uint32_t, const zf_step_buffers *, zf_error *);
  HookEntry hooks_[4] = {};
  bool gathers_from_master_ = false;
};

class OffloadPlugin : public PluginOfKind {
 public:
  explicit OffloadPlugin(LivePlugin live);
  // The tiers for a shard of shard_numel elements; what an older plugin does not set defaults to
  // the model's tier (param_out_tier, param_tier) and the whole shard (host_ratio).
  zf_offload_plan plan(const zf_layout &layout, uint64_t shard_numel, zf_tier model_tier) const;
  bool moves_data() const { return api_.gradients_out && api_.parameters_in; }
  void gradients_out(zf_tensor_view from, zf_tensor_view to, void *stream) const;
  void parameters_in(zf_tensor_view from, zf_tensor_view to, void *stream) const;
  // An event after the transfers of ZF_TRANSFER_* started so far (NULL on CPU runs, or when the
  // plugin has no transfer_event: then this waits for them instead).
  void *transfers_done(int32_t direction) const;
  bool has_tiles() const { return api_.read_tile && api_.write_tile && api_.wait; }
  void write_tile(uint32_t tensor, uint64_t offset, const void *source, uint64_t bytes) const;
  void read_tile(uint32_t tensor, uint64_t offset, void *destination, uint64_t bytes) const;
  void wait() const;  // nothing when absent

 private:
  zf_offload_api api_{};
};

// One state tensor an optimizer lets the host hold (one element per parameter).
struct StateSpec {
  std::string name;
  torch::Dtype dtype;
};

class OptimizerPlugin : public PluginOfKind {
 public:
  explicit OptimizerPlugin(LivePlugin live);
  // The state the host may hold, in spec order (ABI 1.3); empty when the plugin keeps its own.
  const std::vector<StateSpec> &state_specs() const { return specs_; }
  void init_state(uint64_t numel) const;  // a plugin that keeps its own state
  void bind_state(uint64_t numel, const std::vector<zf_tensor_view> &state) const;
  void step(const zf_optimizer_step_args &args) const;
  bool exposes_state() const { return api_.state_tensor != nullptr; }
  // Its own state for checkpoints (name, view), when it keeps its own.
  std::vector<std::pair<std::string, zf_tensor_view>> own_state() const;
  // The names its checkpoints give its state: the specs', else its own state's (once it has one).
  std::vector<std::string> state_names() const;

 private:
  zf_optimizer_api api_{};
  std::vector<StateSpec> specs_;
};

class SelectorPlugin : public PluginOfKind {
 public:
  explicit SelectorPlugin(LivePlugin live);
  // Per-column scores of args.grads into `scores` (left as they are when the plugin has no score).
  void score(const zf_select_args &args, zf_tensor_view scores) const;
  void select(const zf_select_args &args, zf_tensor_view scores, zf_tensor_view mask) const;

 private:
  zf_selector_api api_{};
};

}  // namespace zf
