#include "memory/config_estimate.hpp"

#include "model/transformer_shape.hpp"
#include "plugin/plugin_registry.hpp"
#include "runtime/error.hpp"

#include <algorithm>
#include <filesystem>

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
  *what = format("%s, %llu parameters (blocks from the shape, within alignment padding)", shape.type.c_str(),
                 (unsigned long long)shape.parameter_count());
  std::vector<uint64_t> blocks{embedding};
  blocks.insert(blocks.end(), size_t(shape.layers), per_layer);
  blocks.push_back(head);
  return blocks;
}

// The optimizer's state per parameter: Adam's two moments, Lion's and Adagrad's one, in fp32 or, with
// the CPU optimizers' moment_dtype = "bf16", in bf16.
uint64_t state_bytes(const RunConfig &config, std::string *note) {
  std::string optimizer = config.plugin(ZF_KIND_OPTIMIZER).candidates.front();
  uint64_t element = 4;
  for (const ConfigEntry &entry : config.plugin(ZF_KIND_OPTIMIZER).entries)
    if (entry.key == "moment_dtype" && std::holds_alternative<std::string>(entry.value) &&
        std::get<std::string>(entry.value) == "bf16")
      element = 2;
  if (optimizer == "cpu_lion" || optimizer == "cpu_adagrad") return element;  // one tensor
  if (optimizer != "adamw_ref" && optimizer != "cpu_adam" && optimizer != "gpu_adam")
    *note = "optimizer '" + optimizer + "' unknown to the estimate: assuming Adam's 8 bytes of state per parameter";
  return 2 * element;
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

}  // namespace

EstimateInput estimate_input(const RunConfig &config, uint64_t world, std::string *what, std::string *note) {
  EstimateInput input;
  input.blocks = model_blocks(config, input.alignment, what);
  input.world = world;
  input.compute_bytes = config.string("model", "dtype") == "bfloat16" ? 2 : 4;
  input.state_bytes = state_bytes(config, note);
  input.grad_accum = uint64_t(config.integer("train", "grad_accum"));
  return input;
}

ConfigEstimate estimate_config(const RunConfig &config, uint64_t world) {
  ConfigEstimate out;
  out.input = estimate_input(config, world, &out.what, &out.note);
  PluginRegistry registry(PluginRegistry::default_search_path(config.plugin_path()));
  const PluginSection &stages = config.plugin(ZF_KIND_STAGE), &offloads = config.plugin(ZF_KIND_OFFLOAD);
  out.stage = stages.candidates.front();
  out.offload = offloads.candidates.front();
  const PluginFile &offload = registry.find(ZF_KIND_OFFLOAD, out.offload);
  const PluginConfig offload_config = config_for(offloads, offload);
  for (const std::string &name : stage_names(out.stage)) {
    const PluginFile &stage = registry.find(ZF_KIND_STAGE, name);
    out.stages.push_back(estimate_stage(stage, config_for(stages, stage), out.input));
    out.offloaded.push_back(
        estimate_offload(offload, offload_config, out.input, out.stages.back(), stage.descriptor->capabilities));
  }
  return out;
}

}  // namespace zf
