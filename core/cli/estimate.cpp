// zfcore estimate FILE [--world N] [--bytes] [--set table.key=value]...: per-rank memory of the model
// the config describes, for every stage plugin, before running anything, as the stage and offload
// plugins report it (memory/config_estimate.hpp). The tables are in KiB/MiB/GiB as the run's memory
// plan prints them; --bytes prints every cell as an exact byte count, for scripts.
#include "cli/commands.hpp"

#include "config/config.hpp"
#include "config/deepspeed.hpp"
#include "engine/run_options.hpp"
#include "engine/training_checkpoint.hpp"
#include "memory/config_estimate.hpp"
#include "memory/host_plan.hpp"
#include "runtime/memory.hpp"
#include "update/zenflow_estimate.hpp"

#include <algorithm>
#include <cstdio>

namespace zf {
namespace {

// A table's cell: exact bytes (--bytes) or in the unit the memory plan uses (2.9 GiB).
std::string bytes_cell(uint64_t bytes, bool exact) {
  return exact ? format("%14llu", (unsigned long long)bytes) : format("%14s", format_bytes(bytes).c_str());
}

// The offload table: where each stage's bytes go under the config's offload plugin. Printed when
// the plugin moves anything off the compute tier.
void print_offload(const ConfigEstimate &e, bool exact) {
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
  std::printf("offload %s: per rank, %son each tier%s\n", e.offload.c_str(), exact ? "bytes " : "",
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
                bytes_cell(o.tiers[ZF_TIER_DEVICE], exact).c_str(), bytes_cell(o.tiers[ZF_TIER_PINNED_HOST], exact).c_str(),
                pageable ? (" " + bytes_cell(o.tiers[ZF_TIER_HOST], exact)).c_str() : "",
                bytes_cell(o.tiers[ZF_TIER_NVME], exact).c_str(), mark);
  }
}

// The config's own stage's bytes where the model computes (the offload plugin's device tier).
uint64_t device_bytes(const ConfigEstimate &e) {
  if (!e.own_stage().estimated) return 0;
  return e.own_offload().estimated ? e.own_offload().tiers[ZF_TIER_DEVICE] : e.own_stage().total();
}

// A transformer's activations and the GPU peak they make with the config's own stage and offload
// (and ZenFlow's state, `zenflow`), at the loss and in the backward (estimate_gpu_peak).
void print_gpu_peak(const ConfigEstimate &e, const RunConfig &config, uint64_t zenflow) {
  if (e.tokens == 0) return;
  const ActivationEstimate &a = e.activations;
  const bool checkpointing = config.boolean("model", "activation_checkpointing");
  const unsigned long long layers = e.input.blocks.size() - 2, whole = a.whole_layers;
  const std::string mode = !checkpointing ? "off"
                           : whole == 0   ? "on"
                                          : format("on for the first %llu layers", layers - whole);
  // The last layers kept whole hold their activations at the head, and are freed before any recompute.
  const std::string kept_whole =
      whole == 0 ? "" : format(" and the last %llu layers kept whole, %s each,", whole, format_bytes(a.layer_recompute).c_str());
  const bool fused = config.string("model", "fused") != "false";
  std::printf("activations per rank (%llu tokens a micro-step, activation checkpointing %s): %llu layers x %s%s "
              "then at the loss the head's %s (%s); in the backward the larger of the %s, %s%s%s\n",
              (unsigned long long)e.tokens, mode.c_str(), layers - whole, format_bytes(a.per_layer).c_str(),
              kept_whole.c_str(), format_bytes(a.head).c_str(),
              fused ? "the fused loss: one chunk of tokens' logits" : "the logits and their float32 copies",
              fused ? "fused loss's slice of the vocabulary" : "logits' gradient", format_bytes(a.head_backward).c_str(),
              whole ? " with the layers kept whole" : "",
              checkpointing ? (", and a layer recomputed, " + format_bytes(a.layer_recompute)).c_str() : "");
  if (!e.own_stage().estimated) return;
  const uint64_t device = device_bytes(e) + zenflow;
  const GpuPeak peak = estimate_gpu_peak(e, device);
  std::printf("GPU peak per rank (%s, offload %s): %s of buffers%s; at the loss %s, in the backward %s (ZeRO-2 and -3 "
              "hold their gradient shard from the step's first reduction) = %s (%llu bytes)\n",
              e.stage.c_str(), e.offload.c_str(), format_bytes(device - zenflow).c_str(),
              zenflow ? (" + " + format_bytes(zenflow) + " of ZenFlow's").c_str() : "", format_bytes(peak.at_loss).c_str(),
              format_bytes(peak.in_backward).c_str(), format_bytes(peak.bytes()).c_str(),
              (unsigned long long)peak.bytes());
}

// ZenFlow's own state where the model computes (update/zenflow_estimate.hpp), beside the stage's:
// the gradient sum (a shard), the staging of the one CPU update in flight (the staggered schedule's
// largest group, cut as the run cuts them; the deepspeed schedule's shard), lookahead's last CPU
// results (a shard), and the selected columns' compact copies on the rank that holds the most.
// Returns their bytes.
uint64_t print_zenflow(const RunConfig &config, const ConfigEstimate &e) {
  if (!config.has_table("zenflow") || device_bytes(e) == 0) return 0;
  const uint64_t capacity = zenflow_capacity(config);
  const ZenFlowEstimate z = estimate_zenflow(config, e, capacity, estimate_gpu_peak(e, device_bytes(e)).bytes());
  std::printf("zenflow (schedule %s, update_interval %lld): per rank where the model computes, beside the stage's: "
              "gradient sum %s, staging %s (%llu bytes: %s)%s, selected columns %s = %s\n",
              z.staggered ? "staggered" : "deepspeed", (long long)z.update_interval, format_bytes(z.gradient_sum).c_str(),
              format_bytes(z.staging).c_str(), (unsigned long long)z.staging,
              z.staggered ? format("the largest of %lld groups", (long long)z.update_interval).c_str() : "the shard",
              z.lookahead ? (", last CPU results " + format_bytes(z.last_cpu)).c_str() : "",
              format_bytes(z.selected_bytes()).c_str(), format_bytes(z.total()).c_str());
  std::string ratio = z.automatic ? format("topk_ratio auto: %s %.4g (%s)", z.room_known ? "about" : "at least", z.topk,
                                           z.room_why.c_str())
                                  : format("topk_ratio %g", z.topk);
  std::printf("  selected columns: %s%s; rank %llu holds the most, %llu elements (%llu bytes: %llu an element for "
              "the fp32 master, optimizer state, index%s; %s more while its update gathers the gradient)%s\n",
              ratio.c_str(),
              !z.tables ? "" : z.table_rows ? ", the embedding's tokens chosen among" : ", the embedding whole",
              (unsigned long long)z.rank, (unsigned long long)z.selected, (unsigned long long)z.selected_bytes(),
              (unsigned long long)z.element.held, e.input.compute_bytes != 4 ? " and compute-precision result" : "",
              format_bytes(z.selected * z.element.transient).c_str(),
              z.automatic && !z.room_known ? "; auto then takes the rest of the GPU's memory, less a tenth" : "");
  return z.total();
}

// Whether the config's optimizer takes bf16 moments (its descriptor declares moment_dtype).
bool optimizer_halves_moments(const RunConfig &config, uint64_t state_bytes) {
  try {
    PluginRegistry registry(PluginRegistry::default_search_path(config.plugin_path()));
    const PluginFile &file = registry.find(ZF_KIND_OPTIMIZER, config.plugin(ZF_KIND_OPTIMIZER).candidates.front());
    return moments_halvable(*file.descriptor, state_bytes);
  } catch (const Error &) {  // not installed here (a GPU optimizer in a CPU build): suggest nothing of it
    return false;
  }
}

// The config's own stage per rank and per host, beside what this host has; its checkpoints beside
// their directory's space. The same sums and ways out as the run's check before step 1.
// What one rank of the config holds per tier, as the run's memory plan counts it: its own stage where its
// offload puts it, ZenFlow's state where the model computes, a micro-batch's data (a CPU run's model
// tier and activations in host memory too).
HostDemand config_demand(const RunConfig &config, const ConfigEstimate &e, uint64_t world, uint64_t ranks_per_host,
                         uint64_t zenflow, const MicroBatchMemory &micro) {
  const PluginEstimate *stage = &e.own_stage(), *placed = &e.own_offload();
  const bool cpu = config.string("run", "device") == "cpu";
  HostDemand d;
  d.world = world;
  d.ranks_per_host = int(ranks_per_host);
  if (placed->estimated) {
    d.rank = {placed->tiers[ZF_TIER_DEVICE], placed->tiers[ZF_TIER_PINNED_HOST], placed->tiers[ZF_TIER_HOST],
              placed->tiers[ZF_TIER_NVME]};
  } else {
    d.rank.device = stage->total();
  }
  d.rank.device += zenflow;  // ZenFlow's state, where the model computes
  if (cpu) d.rank.pageable += d.rank.device, d.rank.device = 0;  // a CPU run computes in host memory
  d.rank.pageable += cpu ? micro.bytes() : micro.batch;
  d.state_on_host = std::min(stage->state, d.rank.host());
  d.moments_halvable = optimizer_halves_moments(config, e.input.state_bytes);
  d.nvme_available = nvme_plugin_installed() && e.offload != "nvme" && e.offload != "none";
  return d;
}

// The settings that would bring a host plan within `limit`: the micro-batch's keys when it is most of
// it (as the run's check says), else the state's (host_ways_out).
std::string host_advice(const RunConfig &config, const HostDemand &d, const MicroBatchMemory &micro, uint64_t limit) {
  const uint64_t micro_here = config.string("run", "device") == "cpu" ? micro.bytes() : micro.batch;
  return 2 * micro_here > d.rank.host() ? micro.advice : host_ways_out(d, limit);
}

void print_host_plan(const RunConfig &config, const ConfigEstimate &e, uint64_t world, uint64_t ranks_per_host,
                     uint64_t zenflow, bool exact) {
  const PluginEstimate *stage = &e.own_stage();
  if (!stage->estimated) return;
  const bool cpu = config.string("run", "device") == "cpu";
  const MicroBatchMemory micro = micro_batch_memory(config);  // its data on the host; a CPU run's activations too
  const HostDemand d = config_demand(config, e, world, ranks_per_host, zenflow, micro);
  const HostMemoryLimit limit = host_memory_limit(config.real("run", "host_memory_limit_gb"));
  const uint64_t hosts = (world + ranks_per_host - 1) / ranks_per_host;

  std::printf("\nthis config (stage %s, offload %s): %llu rank%s, %llu per host (%llu host%s)\n", e.stage.c_str(),
              e.offload.c_str(), (unsigned long long)world, world == 1 ? "" : "s", (unsigned long long)ranks_per_host,
              (unsigned long long)hosts, hosts == 1 ? "" : "s");
  std::printf("  %-14s %14s %14s%s\n", "tier", "per rank", "per host", exact ? "  (per host)" : "");
  const std::pair<const char *, uint64_t> rows[] = {{cpu ? "device (CPU)" : "GPU", d.rank.device},
                                                    {"pinned host", d.rank.pinned},
                                                    {"pageable host", d.rank.pageable},
                                                    {"disk (nvme)", d.rank.nvme}};
  // --bytes: the per-host figure once more in the memory plan's unit.
  auto readable = [&](uint64_t bytes) { return exact ? "  " + format_bytes(bytes) : std::string(); };
  for (const auto &[name, bytes] : rows)
    std::printf("  %-14s %s %s%s\n", name, bytes_cell(bytes, exact).c_str(),
                bytes_cell(bytes * ranks_per_host, exact).c_str(), readable(bytes * ranks_per_host).c_str());
  std::printf("  %-14s %s %s%s; this host allows %s (%s): %s\n", "host memory", bytes_cell(d.rank.host(), exact).c_str(),
              bytes_cell(d.per_host(), exact).c_str(), readable(d.per_host()).c_str(), format_bytes(limit.bytes).c_str(),
              limit.source.c_str(), limit.bytes == 0 ? "unknown" : d.per_host() <= limit.bytes ? "fits" : "does not fit");
  std::printf("  (pageable host: a micro-batch's data %s%s; GPU: before activations; the run adds its activations "
              "and, on the host, its own few GiB)\n", format_bytes(micro.batch).c_str(),
              cpu ? (" and activations " + format_bytes(micro.activations)).c_str() : "");
  if (limit.bytes > 0 && d.per_host() > limit.bytes)
    std::printf("  %s\n", host_advice(config, d, micro, limit.bytes).c_str());

  CheckpointDemand saves;
  const RunOptions options = RunOptions::read(config);
  saves.directory = checkpoint_dir(config, options.output_dir);
  saves.bytes_per_rank = stage->master + stage->state;  // the fp32 master and the optimizer state of a shard
  saves.state_per_rank = stage->state;
  saves.world = world;
  saves.keep = config.integer("checkpoint", "keep");
  saves.copies = checkpoint_copies(options.steps, options.checkpoint_every, options.checkpoint_final, saves.keep);
  saves.existing = existing_checkpoint_bytes(saves.directory);
  saves.moments_halvable = d.moments_halvable;
  const DiskSpace space = disk_space(saves.directory, config.real("checkpoint", "disk_limit_gb"));
  std::printf("checkpoint: %s (%llu x %s: fp32 master and optimizer state per shard); %lld on disk at once at most: "
              "%s in %s, which has %s (%s)\n",
              format_bytes(saves.checkpoint_bytes()).c_str(), (unsigned long long)world,
              format_bytes(saves.bytes_per_rank).c_str(), (long long)saves.copies, format_bytes(saves.needed()).c_str(),
              saves.directory.c_str(), format_bytes(space.bytes).c_str(), space.source.c_str());
  try {
    check_checkpoint_space(saves, space);
  } catch (const Error &refused) {
    std::printf("  %s\n", refused.what());
  }
}

// The config's own row in the memory plan's units, on each tier its offload plugin uses: the figure to hold against a
// GPU's or a host's memory.
void print_this_config(const ConfigEstimate &e, uint64_t zenflow) {
  for (size_t i = 0; i < e.stages.size(); ++i) {
    const PluginEstimate &s = e.stages[i];
    if (s.plugin != e.stage || !s.estimated) continue;
    const PluginEstimate *o = i < e.offloaded.size() && e.offloaded[i].estimated ? &e.offloaded[i] : nullptr;
    std::string where = format_bytes((o ? o->tiers[ZF_TIER_DEVICE] : s.total()) + zenflow) +
                        " where the model computes" +
                        (zenflow ? " (ZenFlow's " + format_bytes(zenflow) + " included)" : "");
    if (o && o->tiers[ZF_TIER_PINNED_HOST]) where += ", " + format_bytes(o->tiers[ZF_TIER_PINNED_HOST]) + " pinned host";
    if (o && o->tiers[ZF_TIER_HOST]) where += ", " + format_bytes(o->tiers[ZF_TIER_HOST]) + " host";
    if (o && o->tiers[ZF_TIER_NVME]) where += ", " + format_bytes(o->tiers[ZF_TIER_NVME]) + " on NVMe";
    std::printf("this config (%s, offload %s): per rank %s, before activations\n", e.stage.c_str(), e.offload.c_str(),
                where.c_str());
  }
}

}  // namespace

void check_config_memory_plan(const RunConfig &config) {
  const ConfigEstimate e = estimate_config(config, 1);
  if (!e.own_stage().estimated) return;
  uint64_t zenflow = 0;
  if (config.has_table("zenflow") && device_bytes(e) > 0)
    zenflow = estimate_zenflow(config, e, zenflow_capacity(config), estimate_gpu_peak(e, device_bytes(e)).bytes()).total();
  const MicroBatchMemory micro = micro_batch_memory(config);
  const HostDemand d = config_demand(config, e, 1, 1, zenflow, micro);
  MemoryPlan plan;
  plan.buffers = {{ZF_TIER_DEVICE, "model", d.rank.device},
                  {ZF_TIER_PINNED_HOST, "pinned", d.rank.pinned},
                  {ZF_TIER_HOST, "pageable", d.rank.pageable}};
  const HostMemoryLimit host = host_memory_limit(config.real("run", "host_memory_limit_gb"));
  check_memory_plan(plan, host, 1, 0, [&] {
    const std::string ways = host_advice(config, d, micro, host.bytes);
    return (ways == micro.advice ? "Mostly the micro-batch: " : "") + ways + ".";
  });
}

int command_estimate(const std::vector<std::string> &args) {
  std::vector<std::string> rest;
  uint64_t world = 1, ranks_per_host = 0;
  bool exact = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--bytes") {
      exact = true;
    } else if (args[i] == "--world") {
      if (i + 1 >= args.size()) throw UsageError("--world needs a number of ranks");
      const std::string &text = args[++i];
      char *end = nullptr;
      long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 1 || value > (1 << 20))
        throw UsageError("--world " + text + ": must be an integer in [1, 1048576]");
      world = uint64_t(value);
    } else if (args[i] == "--ranks-per-host") {
      if (i + 1 >= args.size()) throw UsageError("--ranks-per-host needs a number of ranks");
      const std::string &text = args[++i];
      char *end = nullptr;
      long long value = std::strtoll(text.c_str(), &end, 10);
      if (text.empty() || *end != '\0' || value < 1 || value > (1 << 20))
        throw UsageError("--ranks-per-host " + text + ": must be an integer in [1, 1048576]");
      ranks_per_host = uint64_t(value);
    } else {
      rest.push_back(args[i]);
    }
  }
  if (ranks_per_host == 0 || ranks_per_host > world) ranks_per_host = world;  // default: all on one host
  RunArgs run = parse_run_args(rest, "estimate");
  // A DeepSpeed config names no data, and the estimate reads none: only the model must be added.
  const bool json = is_deepspeed_config_name(run.file);
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
  std::printf("per rank%s (ledger tags in plugins/stages/README.md):\n", exact ? ", bytes" : "");
  std::printf("  %-6s %14s %14s %14s %14s %14s %14s %14s  %s\n", "stage", "params", "grads", "master", "opt_state",
              "staging", "transient", "total", "ZeRO paper (2+2+12)/param");
  for (const PluginEstimate &s : e.stages) {
    const char *mark = s.plugin == e.stage ? "   <- this config" : "";
    if (!s.estimated) {
      std::printf("  %-6s %s%s\n", s.plugin.c_str(), s.why.c_str(), mark);
      continue;
    }
    std::printf("  %-6s %s %s %s %s %s %s %s  %s%s\n", s.plugin.c_str(), bytes_cell(s.params, exact).c_str(),
                bytes_cell(s.grads, exact).c_str(), bytes_cell(s.master, exact).c_str(), bytes_cell(s.state, exact).c_str(),
                bytes_cell(s.staging, exact).c_str(), bytes_cell(s.transient, exact).c_str(),
                bytes_cell(s.total(), exact).c_str(), s.reference ? format_bytes(s.reference).c_str() : "-", mark);
  }
  print_offload(e, exact);
  const uint64_t zenflow = print_zenflow(config, e);
  print_gpu_peak(e, config, zenflow);
  print_this_config(e, zenflow);
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
  print_host_plan(config, e, world, ranks_per_host, zenflow, exact);
  return 0;
}

}  // namespace zf
