// zfcore estimate FILE [--world N] [--set table.key=value]...: per-rank memory of the model the
// config describes, for every stage plugin, before running anything, as the stage and offload
// plugins report it (memory/config_estimate.hpp).
#include "cli/commands.hpp"

#include "config/config.hpp"
#include "memory/config_estimate.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cstdio>

namespace zf {
namespace {

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

// A transformer's activations and the GPU peak they make with the config's own stage and offload:
// the device tier's bytes plus the activations at their peak.
void print_gpu_peak(const ConfigEstimate &e, const RunConfig &config) {
  if (e.tokens == 0) return;
  const ActivationEstimate &a = e.activations;
  const bool checkpointing = config.boolean("model", "activation_checkpointing");
  std::printf("activations per rank (%llu tokens a micro-step, activation checkpointing %s): %s at the peak "
              "(%llu layers x %s, then the larger of the head's %s and %s)\n",
              (unsigned long long)e.tokens, checkpointing ? "on" : "off", format_bytes(a.peak).c_str(),
              (unsigned long long)e.input.blocks.size() - 2, format_bytes(a.per_layer).c_str(),
              format_bytes(a.head).c_str(),
              checkpointing ? ("a layer recomputed, " + format_bytes(a.layer_recompute)).c_str() : "nothing else");
  for (size_t i = 0; i < e.stages.size(); ++i) {
    if (e.stages[i].plugin != e.stage) continue;
    const PluginEstimate &o = e.offloaded[i], &s = e.stages[i];
    if (!s.estimated) return;
    const uint64_t device = o.estimated ? o.tiers[ZF_TIER_DEVICE] : s.total();
    std::printf("GPU peak per rank (%s, offload %s): %s of buffers + %s of activations = %s (%llu bytes)\n",
                e.stage.c_str(), e.offload.c_str(), format_bytes(device).c_str(), format_bytes(a.peak).c_str(),
                format_bytes(device + a.peak).c_str(), (unsigned long long)(device + a.peak));
  }
}

std::string gib(uint64_t bytes) { return format("%.2f GiB", double(bytes) / double(1ull << 30)); }

// The config's own row in GiB, on each tier its offload plugin uses: the figure to hold against a
// GPU's or a host's memory.
void print_this_config(const ConfigEstimate &e) {
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const PluginEstimate &s = e.stages[i];
    if (s.plugin != e.stage || !s.estimated) continue;
    const PluginEstimate *o = i < e.offloaded.size() && e.offloaded[i].estimated ? &e.offloaded[i] : nullptr;
    std::string where = gib(o ? o->tiers[ZF_TIER_DEVICE] : s.total()) + " where the model computes";
    if (o && o->tiers[ZF_TIER_PINNED_HOST]) where += ", " + gib(o->tiers[ZF_TIER_PINNED_HOST]) + " pinned host";
    if (o && o->tiers[ZF_TIER_HOST]) where += ", " + gib(o->tiers[ZF_TIER_HOST]) + " host";
    if (o && o->tiers[ZF_TIER_NVME]) where += ", " + gib(o->tiers[ZF_TIER_NVME]) + " on NVMe";
    std::printf("this config (%s, offload %s): per rank %s, before activations\n", e.stage.c_str(), e.offload.c_str(),
                where.c_str());
  }
}

}  // namespace

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
  // A DeepSpeed config names no data, and the estimate reads none: only the model must be added.
  const bool json = run.file.size() > 5 && run.file.compare(run.file.size() - 5, 5, ".json") == 0;
  if (json && std::none_of(run.overrides.begin(), run.overrides.end(),
                           [](const std::string &set) { return set.rfind("data.", 0) == 0; }))
    run.overrides.push_back("data.type=random");
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
  print_gpu_peak(e, config);
  print_this_config(e);
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
