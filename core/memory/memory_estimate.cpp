#include "memory/memory_estimate.hpp"

#include "plugin/plugin_registry.hpp"
#include "plugin/plugin_set.hpp"

#include <algorithm>
#include <cstring>
#include <variant>
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

// train.grad_accum_dtype = "float32" (input.grad_bytes 4 beside a bf16 model): a stage plugin
// counts its gradients in the compute dtype, the host holds them wider. Beside the whole
// gradients (zero0, zero1) their fp32 sum; a stage that reduces per block (zero2, zero3) keeps an
// fp32 shard, stages its additions in fp32 and widens a piece of a block (at most the largest
// block, at most a reduce bucket) before each reduce (plugins/stages/common/zero_shard.hpp).
void add_wide_gradients(PluginEstimate &e, const EstimateInput &in, uint64_t capabilities, const PluginConfig &config) {
  const uint64_t c = in.compute_bytes, g = in.grad_bytes;
  if (!e.estimated || g == 0 || g == c) return;
  const uint64_t before = e.total();
  if (capabilities & ZF_CAP_SHARD_GRADIENTS) {
    uint64_t piece = 0;
    for (uint64_t b : in.blocks) piece = std::max(piece, b);
    if (const Value *bucket = config.get("reduce_bucket_size"); bucket && std::holds_alternative<int64_t>(*bucket))
      piece = std::min(piece, uint64_t(std::max<int64_t>(1, std::get<int64_t>(*bucket))));
    e.grads = e.grads / c * g;
    e.staging = e.staging / c * g + g * piece;
  } else {
    e.grads += e.grads / c * g;
  }
  e.tiers[ZF_TIER_DEVICE] += e.total() - before;
  e.note += std::string(e.note.empty() ? "" : "; ") +
            (capabilities & ZF_CAP_SHARD_GRADIENTS ? "train.grad_accum_dtype = float32: grads 4S, staging in fp32 "
                                                     "and a block's piece widened"
                                                   : "train.grad_accum_dtype = float32: grads + 4 bytes an element "
                                                     "(their fp32 sum)");
}

}  // namespace

PluginEstimate estimate_stage(const PluginFile &stage, const PluginConfig &config, const EstimateInput &input) {
  zf_memory_shape shape = shape_of(input);
  shape.stage_capabilities = stage.descriptor->capabilities;
  PluginEstimate e = read(stage, ask_plugin_memory(stage, config, shape));
  add_wide_gradients(e, input, stage.descriptor->capabilities, config);
  return e;
}

PluginEstimate estimate_offload(const PluginFile &offload, const PluginConfig &config, const EstimateInput &input,
                                const PluginEstimate &stage, uint64_t stage_caps) {
  zf_memory_shape shape = shape_of(input);
  shape.stage_capabilities = stage_caps;
  zf_memory_estimate stage_bytes = raw(stage);
  shape.stage = stage.estimated ? &stage_bytes : nullptr;
  PluginEstimate e = read(offload, ask_plugin_memory(offload, config, shape));
  // fp32 gradients (train.grad_accum_dtype): the host copy of the gradient shard an offload
  // plugin counts in the compute dtype is fp32, beside the master (host memory).
  if (e.estimated && input.grad_bytes > input.compute_bytes && stage.estimated)
    for (zf_tier tier : {ZF_TIER_PINNED_HOST, ZF_TIER_HOST})
      if (e.tiers[tier] >= stage.master) {
        e.tiers[tier] += stage.master / 4 * (input.grad_bytes - input.compute_bytes);
        break;
      }
  return e;
}

std::string memory_advice(const PluginSet &plugins, const zf_layout &layout, uint64_t world, uint64_t compute_bytes,
                          uint64_t grad_accum, uint64_t grad_bytes) {
  EstimateInput input;
  for (uint32_t b = 0; b < layout.block_count; ++b) input.blocks.push_back(layout.blocks[b].numel);
  input.world = world;
  input.compute_bytes = compute_bytes;
  input.alignment = layout.alignment;
  input.grad_accum = grad_accum;
  input.grad_bytes = grad_bytes;
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
