#include "memory/memory_estimate.hpp"

#include "plugin/plugin_registry.hpp"
#include "plugin/plugin_set.hpp"

#include <cstring>
#include <filesystem>

namespace zf {

namespace {

zf_memory_shape shape_of(const EstimateInput &in) {
  zf_memory_shape shape{};
  shape.block_count = uint32_t(in.blocks.size());
  shape.blocks = in.blocks.data();
  shape.alignment = in.alignment;
  shape.world_size = in.world;
  shape.compute_bytes = in.compute_bytes;
  shape.state_bytes = in.state_bytes;
  shape.grad_accum = in.grad_accum;
  return shape;
}

PluginEstimate read(const PluginFile &file, const PluginMemory &memory) {
  PluginEstimate e;
  e.plugin = file.descriptor->name;
  e.estimated = memory.estimated;
  e.why = memory.why;
  if (!e.estimated) return e;
  const zf_memory_estimate &b = memory.bytes;
  e.params = b.params, e.grads = b.grads, e.master = b.master, e.state = b.state;
  e.staging = b.staging, e.transient = b.transient, e.reference = b.reference;
  for (int t = 0; t < ZF_TIER_COUNT; ++t) e.tiers[t] = b.tier_bytes[t];
  e.note = b.note;
  e.advice = b.advice;
  return e;
}

// The stage's answer as the offload plugin reads it.
zf_memory_estimate raw(const PluginEstimate &e) {
  zf_memory_estimate b{};
  b.struct_size = sizeof b;
  b.params = e.params, b.grads = e.grads, b.master = e.master, b.state = e.state;
  b.staging = e.staging, b.transient = e.transient, b.reference = e.reference;
  for (int t = 0; t < ZF_TIER_COUNT; ++t) b.tier_bytes[t] = e.tiers[t];
  return b;
}

}  // namespace

PluginEstimate estimate_stage(const PluginFile &stage, const PluginConfig &config, const EstimateInput &input) {
  zf_memory_shape shape = shape_of(input);
  shape.stage_capabilities = stage.descriptor->capabilities;
  return read(stage, ask_plugin_memory(stage, config, shape));
}

PluginEstimate estimate_offload(const PluginFile &offload, const PluginConfig &config, const EstimateInput &input,
                                const PluginEstimate &stage, uint64_t stage_caps) {
  zf_memory_shape shape = shape_of(input);
  shape.stage_capabilities = stage_caps;
  zf_memory_estimate stage_bytes = raw(stage);
  shape.stage = stage.estimated ? &stage_bytes : nullptr;
  return read(offload, ask_plugin_memory(offload, config, shape));
}

std::string memory_advice(const PluginSet &plugins, const zf_layout &layout, uint64_t world, uint64_t compute_bytes,
                          uint64_t grad_accum) {
  EstimateInput input;
  for (uint32_t b = 0; b < layout.block_count; ++b) input.blocks.push_back(layout.blocks[b].numel);
  input.world = world;
  input.compute_bytes = compute_bytes;
  input.alignment = layout.alignment;
  input.grad_accum = grad_accum;
  uint64_t state = 0;  // the optimizer's state tensors, when the host holds them (else Adam's 8)
  for (const StateSpec &spec : plugins.optimizer.state_specs()) state += c10::elementSize(spec.dtype);
  if (state) input.state_bytes = state;
  const StagePlugin &stage = plugins.stage;
  const OffloadPlugin &offload = plugins.offload;
  PluginEstimate s = estimate_stage(stage.file(), stage.config(), input);
  PluginEstimate o = estimate_offload(offload.file(), offload.config(), input, s, stage.file().descriptor->capabilities);
  std::string advice = "What would fit: ";
  if (!s.advice.empty()) advice += "stage " + s.plugin + ": " + s.advice + "; ";
  if (!o.advice.empty()) advice += "offload " + o.plugin + ": " + o.advice + "; ";
  return advice + "optimizer.moment_dtype = \"bf16\" where the optimizer has it (halves the optimizer state), "
                  "or a smaller model";
}

bool moments_halvable(const zf_descriptor &optimizer, uint64_t state_bytes_per_element) {
  bool declared = false;
  for (uint32_t i = 0; i < optimizer.param_count; ++i)
    declared = declared || std::strcmp(optimizer.params[i].key, "moment_dtype") == 0;
  return declared && state_bytes_per_element >= 8;  // two fp32 moments (bf16: 4)
}

bool nvme_plugin_installed() {
  std::error_code ec;
  return std::filesystem::exists(PluginRegistry::builtin_dir() / "zf-offload-nvme.so", ec);
}

HostDemand host_demand(const MemoryPlan &plan, const PluginSet &plugins, int ranks_per_host, uint64_t world) {
  HostDemand d;
  d.rank = {plan.bytes(ZF_TIER_DEVICE), plan.bytes(ZF_TIER_PINNED_HOST), plan.bytes(ZF_TIER_HOST),
            plan.bytes(ZF_TIER_NVME)};
  d.ranks_per_host = ranks_per_host;
  d.world = world;
  const OptimizerPlugin &optimizer = plugins.optimizer;
  const std::string prefix = std::string(optimizer.name()) + ".";
  for (const PlannedBuffer &b : plan.buffers)  // the state tensors, not their disk tiles
    if ((b.tier == ZF_TIER_HOST || b.tier == ZF_TIER_PINNED_HOST) && b.tag.rfind(prefix, 0) == 0 &&
        b.tag.find("(disk tiles)") == std::string::npos)
      d.state_on_host += b.bytes;
  uint64_t state_bytes = 0;
  for (const StateSpec &spec : optimizer.state_specs()) state_bytes += c10::elementSize(spec.dtype);
  d.moments_halvable = moments_halvable(*optimizer.file().descriptor, state_bytes);
  d.nvme_available = nvme_plugin_installed() && std::string(plugins.offload.name()) != "nvme";
  return d;
}

}  // namespace zf
