#include "memory/config_estimate.hpp"

#include "model/transformer_shape.hpp"
#include "plugin/memory_entry.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <filesystem>
#include <variant>

namespace zf {
namespace {

uint64_t aligned(uint64_t numel, uint64_t alignment) { return (numel + alignment - 1) / alignment * alignment; }

std::vector<uint64_t> model_blocks(const RunConfig &config, uint64_t alignment, std::string *what) {
  if (!is_transformer_config(config)) {  // linear_stack
    uint64_t h = uint64_t(config.integer("model", "hidden")), layers = uint64_t(config.integer("model", "layers"));
    *what = format("linear_stack, %llu layers of %llu x %llu (exact)", (unsigned long long)layers,
                   (unsigned long long)h, (unsigned long long)h);
    return std::vector<uint64_t>(layers, aligned(h * h, alignment) + aligned(h, alignment));
  }
  TransformerShape shape = transformer_options(config).shape;
  TransformerShape none = shape, one = shape;
  none.layers = 0;
  one.layers = 1;
  uint64_t per_layer = one.parameter_count() - none.parameter_count();
  uint64_t embedding = uint64_t(shape.vocab * shape.hidden) + (shape.is_gpt2() ? uint64_t(shape.max_seq * shape.hidden) : 0);
  uint64_t head = none.parameter_count() - embedding;
  // A mixture of experts holds (and updates) every expert; a token computes with its top k.
  const uint64_t active = shape.active_parameter_count();
  const bool gemma4 = shape.features.gemma4.experts > 0;  // Gemma 4's experts beside the MLP (its own spec)
  const int64_t top_k = gemma4 ? shape.features.gemma4.top_k : shape.features.moe.top_k;
  const int64_t experts_per_layer = gemma4 ? shape.features.gemma4.experts : shape.features.moe.experts;
  const std::string experts = active == shape.parameter_count()
                                  ? ""
                                  : format(", %llu active per token (%lld of %lld experts)", (unsigned long long)active,
                                           (long long)top_k, (long long)experts_per_layer);
  *what = format("%s, %llu parameters%s (blocks from the shape, within alignment padding)", shape.type.c_str(),
                 (unsigned long long)shape.parameter_count(), experts.c_str());
  std::vector<uint64_t> blocks{embedding};
  blocks.insert(blocks.end(), size_t(shape.layers), per_layer);
  blocks.push_back(head);
  return blocks;
}

// The stage plugins `zfcore estimate` compares: every one in the built-in directory, and the
// config's own (which may come from elsewhere on the plugin path), by name.
std::vector<std::string> stage_names(const std::string &chosen) {
  std::vector<std::string> names{chosen};
  const std::string prefix = "zf-stage-", suffix = ".so";
  std::error_code ec;
  for (const auto &entry : std::filesystem::directory_iterator(PluginRegistry::builtin_dir(), ec)) {
    const std::string file = entry.path().filename().string();
    if (file.size() > prefix.size() + suffix.size() && file.rfind(prefix, 0) == 0 &&
        file.compare(file.size() - suffix.size(), suffix.size(), suffix) == 0)
      names.push_back(file.substr(prefix.size(), file.size() - prefix.size() - suffix.size()));
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

// A plugin's table for the estimate: the section's keys that the plugin declares (the run's
// stage knobs apply to every stage that has them, as switching stage.plugin would apply them).
PluginConfig config_for(const PluginSection &section, const PluginFile &file) {
  PluginSection mine = section;
  mine.entries.clear();
  for (const ConfigEntry &entry : section.entries)
    for (uint32_t i = 0; i < file.descriptor->param_count; ++i)
      if (entry.key == file.descriptor->params[i].key) mine.entries.push_back(entry);
  return RunConfig::plugin_config(mine, *file.descriptor);
}

// The optimizer's state bytes per parameter, as the optimizer plugin reports them for the blocks
// (ABI 1.9); Adam's 8 when it has no estimate.
uint64_t state_bytes(const RunConfig &config, PluginRegistry &registry, const std::vector<uint64_t> &blocks,
                     std::string *note) {
  const PluginSection &section = config.plugin(ZF_KIND_OPTIMIZER);
  PluginMemory memory;
  try {  // a GPU optimizer is absent from a CPU build, where its config is still estimated
    const PluginFile &file = registry.find(ZF_KIND_OPTIMIZER, section.candidates.front());
    zf_memory_shape shape{};
    shape.block_count = uint32_t(blocks.size());
    shape.blocks = blocks.data();
    memory = ask_plugin_memory(file, config_for(section, file), shape);
  } catch (const Error &) {
    memory.why = "no estimate: optimizer plugin '" + section.candidates.front() + "' is not installed here";
  }
  uint64_t numel = 0;
  for (uint64_t b : blocks) numel += b;
  if (!memory.estimated || numel == 0) {
    *note = memory.why + "; assuming Adam's 8 bytes of optimizer state per parameter";
    return 8;
  }
  return (memory.bytes.state + numel - 1) / numel;
}

}  // namespace

EstimateInput estimate_input(const RunConfig &config, PluginRegistry &registry, uint64_t world, std::string *what,
                             std::string *note) {
  EstimateInput input;
  input.blocks = model_blocks(config, input.alignment, what);
  input.world = world;
  input.compute_bytes = config.string("model", "dtype") == "bfloat16" ? 2 : 4;
  input.state_bytes = state_bytes(config, registry, input.blocks, note);
  input.grad_accum = uint64_t(config.integer("train", "grad_accum"));
  if (input.compute_bytes != 4 && config.string("train", "grad_accum_dtype") == "float32") input.grad_bytes = 4;
  return input;
}

ConfigEstimate estimate_config(const RunConfig &config, uint64_t world) {
  ConfigEstimate out;
  PluginRegistry registry(PluginRegistry::default_search_path(config.plugin_path()));
  out.input = estimate_input(config, registry, world, &out.what, &out.note);
  if (is_transformer_config(config)) {
    out.tokens = uint64_t(config.integer("train", "micro_batch") * config.integer("data", "seq_len"));
    out.activations = estimate_activations(transformer_options(config), out.tokens,
                                           uint64_t(std::max<int64_t>(0, config.integer("data", "seq_len"))));
  }
  const PluginSection &stages = config.plugin(ZF_KIND_STAGE), &offloads = config.plugin(ZF_KIND_OFFLOAD);
  out.stage = stages.candidates.front();
  out.offload = offloads.candidates.front();
  const PluginFile &offload = registry.find(ZF_KIND_OFFLOAD, out.offload);
  const PluginConfig offload_config = config_for(offloads, offload);
  if (const Value *bucket = offload_config.get("bucket_size"); bucket && std::holds_alternative<int64_t>(*bucket))
    out.bucket_numel = uint64_t(std::max<int64_t>(0, std::get<int64_t>(*bucket)));
  for (const std::string &name : stage_names(out.stage)) {
    const PluginFile &stage = registry.find(ZF_KIND_STAGE, name);
    out.stages.push_back(estimate_stage(stage, config_for(stages, stage), out.input));
    out.offloaded.push_back(
        estimate_offload(offload, offload_config, out.input, out.stages.back(), stage.descriptor->capabilities));
    if (name == out.stage) out.own = out.stages.size() - 1, out.stage_capabilities = stage.descriptor->capabilities;
  }
  return out;
}

MicroBatchMemory micro_batch_memory(const RunConfig &config) {
  MicroBatchMemory m;
  const uint64_t micro = uint64_t(std::max<int64_t>(0, config.integer("train", "micro_batch")));
  if (is_transformer_config(config)) {
    const uint64_t seq_len = uint64_t(std::max<int64_t>(0, config.integer("data", "seq_len")));
    const uint64_t tokens = micro * seq_len;
    m.batch = tokens * 2 * sizeof(int64_t);
    m.activations = estimate_activations(transformer_options(config), tokens, seq_len).peak();
    m.advice = format("lower train.micro_batch (%llu) or data.seq_len (%llu): one micro-batch of %llu tokens takes %s "
                      "of data and activations (raise train.grad_accum to keep the batch)",
                      (unsigned long long)micro, (unsigned long long)seq_len, (unsigned long long)tokens,
                      format_bytes(m.bytes()).c_str());
  } else {
    const uint64_t hidden = uint64_t(std::max<int64_t>(0, config.integer("model", "hidden")));
    const uint64_t layers = uint64_t(std::max<int64_t>(0, config.integer("model", "layers")));
    const uint64_t element = config.string("model", "dtype") == "bfloat16" ? 2 : 4;
    m.batch = micro * (hidden * element + sizeof(int64_t));
    m.activations = micro * hidden * element * layers;
    m.advice = format("lower train.micro_batch (%llu): one micro-batch takes %s of data and activations (raise "
                      "train.grad_accum to keep the batch)",
                      (unsigned long long)micro, format_bytes(m.bytes()).c_str());
  }
  return m;
}

void plan_micro_batch(MemoryPlan &plan, const MicroBatchMemory &micro, bool on_gpu) {
  if (!on_gpu) {
    plan.buffers.push_back({ZF_TIER_HOST, "micro-batch data + activations", micro.bytes()});
    return;
  }
  plan.buffers.push_back({ZF_TIER_HOST, "micro-batch data", micro.batch});
  plan.buffers.push_back({ZF_TIER_DEVICE, "micro-batch activations", micro.activations});
}

GpuPeak estimate_gpu_peak(const ConfigEstimate &e, uint64_t device) {
  GpuPeak peak;
  if (e.tokens == 0) return {device, device};
  uint64_t largest = 0;
  for (uint64_t numel : e.input.blocks) largest = std::max(largest, numel);
  const uint64_t block_grads = largest * e.input.compute_bytes;
  uint64_t backward_only = 0, kept_block = 0;
  if (e.stage_capabilities & ZF_CAP_SHARD_GRADIENTS) {
    // With accumulation the shard is held from the first micro-step's reductions: the later
    // micro-steps' losses have it.
    backward_only = (e.input.grad_accum > 1 ? 0 : e.own_stage().grads) + block_grads;
    kept_block = block_grads;
  }
  peak.at_loss = device - std::min(device, backward_only) + e.activations.at_loss;
  peak.in_backward = device + kept_block + e.activations.in_backward;
  return peak;
}

}  // namespace zf
