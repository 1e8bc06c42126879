// zfcore estimate FILE [--world N] [--set table.key=value]...: per-rank memory of the model the
// config describes, for every stage plugin, before running anything, as the stage and offload
// plugins report it (engine/memory_estimate.hpp). The model is not built: the block sizes come from
// the shape (linear_stack exactly; transformers from their parameter counts: embeddings, one
// block per layer, and the head).
#include "cli/commands.hpp"
#include "cli/estimate.hpp"

#include "config/config.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cstdio>
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

std::string bytes_cell(uint64_t bytes) { return format("%14llu", (unsigned long long)bytes); }

// The offload table: where each stage's bytes go under the config's offload plugin. Printed when
// the plugin moves anything off the compute tier.
void print_offload(const ConfigEstimate &e) {
  bool moves = false, pageable = false;
  const PluginEstimate *reported = nullptr;
  for (const PluginEstimate &o : e.offloaded) {
    if (!o.estimated) continue;
    reported = &o;
    moves = moves || o.tiers[ZF_TIER_PINNED_HOST] || o.tiers[ZF_TIER_HOST] || o.tiers[ZF_TIER_NVME];
    pageable = pageable || o.tiers[ZF_TIER_HOST];
  }
  if (!reported) {
    std::printf("offload %s: %s\n", e.offload.c_str(),
                e.offloaded.empty() ? "no estimate" : e.offloaded.front().why.c_str());
    return;
  }
  if (!moves) return;
  std::printf("offload %s: per rank, bytes on each tier%s\n", e.offload.c_str(),
              reported->note.empty() ? "" : (" (" + reported->note + ")").c_str());
  std::printf("  %-6s %14s %14s%s %14s\n", "stage", "device", "pinned host", pageable ? format(" %14s", "host").c_str() : "",
              "nvme");
  for (size_t i = 0; i < e.offloaded.size(); ++i) {
    const PluginEstimate &o = e.offloaded[i];
    const char *mark = e.stages[i].plugin == e.stage ? "   <- this config" : "";
    if (!o.estimated) {
      std::printf("  %-6s no estimate%s\n", e.stages[i].plugin.c_str(), mark);
      continue;
    }
    std::printf("  %-6s %s %s%s %s%s\n", e.stages[i].plugin.c_str(),
                bytes_cell(o.tiers[ZF_TIER_DEVICE]).c_str(), bytes_cell(o.tiers[ZF_TIER_PINNED_HOST]).c_str(),
                pageable ? (" " + bytes_cell(o.tiers[ZF_TIER_HOST])).c_str() : "",
                bytes_cell(o.tiers[ZF_TIER_NVME]).c_str(), mark);
  }
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

int command_estimate(const std::vector<std::string> &args) {
  std::vector<std::string> rest;
  uint64_t world = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--world") {
      if (i + 1 >= args.size()) throw UsageError("--world needs a number of ranks");
      const std::string &text = args[++i];
      char *end = nullptr;
      long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 1 || value > (1 << 20))
        throw UsageError("--world " + text + ": must be an integer in [1, 1048576]");
      world = uint64_t(value);
    } else {
      rest.push_back(args[i]);
    }
  }
  RunArgs run = parse_run_args(rest, "estimate");
  RunConfig config = RunConfig::load(run.file, run.overrides, run.unsets);
  config.apply_global_batch(int(world));
  print_config_notes(config);
  const ConfigEstimate e = estimate_config(config, world);
  const EstimateInput &input = e.input;
  std::string optimizer = config.plugin(ZF_KIND_OPTIMIZER).candidates.front();

  std::printf("model: %s\n", e.what.c_str());
  std::printf("world size %llu, compute dtype %s, optimizer %s (%llu bytes of state per parameter)\n",
              (unsigned long long)world, input.compute_bytes == 2 ? "bfloat16" : "float32", optimizer.c_str(),
              (unsigned long long)input.state_bytes);
  if (!e.note.empty()) std::printf("note: %s\n", e.note.c_str());
  std::printf("per rank, bytes (ledger tags in plugins/stages/README.md):\n");
  std::printf("  %-6s %14s %14s %14s %14s %14s %14s %14s  %s\n", "stage", "params", "grads", "master", "opt_state",
              "staging", "transient", "total", "ZeRO paper (2+2+12)/param");
  for (const PluginEstimate &s : e.stages) {
    const char *mark = s.plugin == e.stage ? "   <- this config" : "";
    if (!s.estimated) {
      std::printf("  %-6s %s%s\n", s.plugin.c_str(), s.why.c_str(), mark);
      continue;
    }
    std::printf("  %-6s %14llu %14llu %14llu %14llu %14llu %14llu %14llu  %s%s\n", s.plugin.c_str(),
                (unsigned long long)s.params, (unsigned long long)s.grads, (unsigned long long)s.master,
                (unsigned long long)s.state, (unsigned long long)s.staging, (unsigned long long)s.transient,
                (unsigned long long)s.total(), s.reference ? format_bytes(s.reference).c_str() : "-", mark);
  }
  print_offload(e);
  std::printf("formulas (P elements, N ranks, S = ceil(P / N) rounded up to 64, c = %llu compute bytes, k state "
              "bytes), as each stage plugin reports them:\n",
              (unsigned long long)input.compute_bytes);
  for (const PluginEstimate &s : e.stages)
    if (s.estimated && !s.note.empty()) std::printf("  %s: %s\n", s.plugin.c_str(), s.note.c_str());
  std::printf(
      "  transient: held only while one block computes (its gradients during its backward; a stage that\n"
      "  shards parameters: its gathered parameters too); staging: the collectives' buffers (a stage\n"
      "  that reduces block by block stages a reduction only with train.grad_accum > 1); grads: from\n"
      "  the backward to the update.\n"
      "  CPU float32 runs: c = 4, so the per-parameter bytes are 4 + 4 + 4 + k instead of 2 + 2 + 12.\n");
  return 0;
}

}  // namespace zf
