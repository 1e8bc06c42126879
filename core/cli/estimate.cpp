// zfcore estimate FILE [--world N] [--set table.key=value]...: per-rank memory of the model the
// config describes, for every ZeRO stage, before running anything. The model is not built: the
// block sizes come from the shape (linear_stack exactly; transformers from their parameter
// counts: embeddings, one block per layer, and the head).
#include "cli/commands.hpp"
#include "cli/estimate.hpp"

#include "config/config.hpp"
#include "memory/memory_estimate.hpp"
#include "model/transformer_shape.hpp"
#include "runtime/memory.hpp"

#include <algorithm>
#include <cstdio>

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

int64_t stage_knob(const RunConfig &config, const std::string &key, int64_t fallback) {
  for (const ConfigEntry &entry : config.plugin(ZF_KIND_STAGE).entries)
    if (entry.key == key && std::holds_alternative<int64_t>(entry.value)) return std::get<int64_t>(entry.value);
  return fallback;
}

}  // namespace

EstimateInput estimate_input(const RunConfig &config, uint64_t world, std::string *what, std::string *note) {
  EstimateInput input;
  input.blocks = model_blocks(config, input.alignment, what);
  input.world = world;
  input.compute_bytes = config.string("model", "dtype") == "bfloat16" ? 2 : 4;
  input.state_bytes = state_bytes(config, note);
  input.persistence_threshold = uint64_t(stage_knob(config, "param_persistence_threshold", 100000));
  input.max_live_parameters = uint64_t(stage_knob(config, "max_live_parameters", 1000000000));
  input.reduce_bucket_size = uint64_t(stage_knob(config, "reduce_bucket_size", 500000000));
  input.allgather_bucket_size = uint64_t(stage_knob(config, "allgather_bucket_size", 500000000));
  input.grad_accum = uint64_t(config.integer("train", "grad_accum"));
  return input;
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
  std::string what, note;
  EstimateInput input = estimate_input(config, world, &what, &note);
  bool bf16 = input.compute_bytes == 2;
  std::string optimizer = config.plugin(ZF_KIND_OPTIMIZER).candidates.front();
  std::string chosen = config.plugin(ZF_KIND_STAGE).candidates.front();

  std::printf("model: %s\n", what.c_str());
  std::printf("world size %llu, compute dtype %s, optimizer %s (%llu bytes of state per parameter)\n",
              (unsigned long long)world, bf16 ? "bfloat16" : "float32", optimizer.c_str(),
              (unsigned long long)input.state_bytes);
  if (!note.empty()) std::printf("note: %s\n", note.c_str());
  std::printf("per rank, bytes (ledger tags in plugins/stages/README.md):\n");
  std::printf("  %-6s %14s %14s %14s %14s %14s %14s %14s  %s\n", "stage", "params", "grads", "master", "opt_state",
              "staging", "transient", "total", "ZeRO paper (2+2+12)/param");
  for (const StageEstimate &e : estimate_memory(input)) {
    std::printf("  %-6s %14llu %14llu %14llu %14llu %14llu %14llu %14llu  %s%s\n", e.stage.c_str(),
                (unsigned long long)e.params, (unsigned long long)e.grads, (unsigned long long)e.master,
                (unsigned long long)e.state, (unsigned long long)e.staging, (unsigned long long)e.transient,
                (unsigned long long)e.total(), format_bytes(e.paper).c_str(), e.stage == chosen ? "   <- this config" : "");
  }
  std::string offload = config.plugin(ZF_KIND_OFFLOAD).candidates.front();
  if (offload == "cpu_optimizer" || offload == "nvme" || offload == "cpu_full") {
    // The master and the optimizer state move to pinned host memory, with a host copy of the
    // gradient shard and (bf16/fp16 runs) of the updated parameters; nvme puts the state on disk
    // (and keeps three tiles of it per state tensor in pinned memory, not counted here); cpu_full
    // moves the working parameters (zero3: the shard) there instead of the updated copy, and the
    // device holds the blocks in use (two of the largest) plus offload.prefetch_size ahead. zero3
    // keeps a compute-precision shard of its own once the master is in host memory.
    const bool disk = offload == "nvme", params_out = offload == "cpu_full";
    const uint64_t c = input.compute_bytes, largest = *std::max_element(input.blocks.begin(), input.blocks.end());
    std::printf("offload %s: per rank, bytes on each tier%s\n", offload.c_str(),
                disk ? " (pinned: plus 3 tiles of offload.bucket_size per state tensor)"
                : params_out ? " (device: plus offload.prefetch_size elements copied ahead)" : "");
    std::printf("  %-6s %14s %14s %14s\n", "stage", "device", "pinned host", "nvme");
    for (const StageEstimate &e : estimate_memory(input)) {
      uint64_t shard = e.master / 4;
      uint64_t copies = shard * c * (c == 4 || params_out ? 1 : 2);
      const bool zero3 = e.stage == "zero3";
      uint64_t device = e.grads + e.staging + e.transient, pinned = e.master + copies;
      if (params_out) {  // the working parameters (zero3: its shard; the resident blocks stay) in host memory
        device += (zero3 ? e.params : 0) + 2 * c * largest;
        pinned += zero3 ? c * shard : e.params;
      } else {
        device += e.params + (zero3 ? c * shard : 0);
      }
      std::printf("  %-6s %14llu %14llu %14llu%s\n", e.stage.c_str(), (unsigned long long)device,
                  (unsigned long long)(pinned + (disk ? 0 : e.state)), (unsigned long long)(disk ? e.state : 0),
                  e.stage == chosen ? "   <- this config" : "");
    }
  }
  std::printf(
      "formulas (P elements, N ranks, S = ceil(P / N) rounded up to 64, c = %llu compute bytes, k state bytes):\n"
      "  zero0: params cP, grads cP, master 4P, state kP                  (paper: 16P)\n"
      "  zero1: params cNS, grads cNS, master 4S, state kS                (paper: 4P + 12P/N)\n"
      "  zero2: params cNS, grads cS, master 4S, state kS                 (paper: 2P + 14P/N)\n"
      "  zero3: params c x resident blocks, grads cS, master 4S, kS       (paper: 16P/N)\n"
      "         (blocks are gathered from the fp32 master; under offload a shard cS of its own)\n"
      "  transient: one block's gradients while its backward runs (zero2, zero3), and its gathered\n"
      "  parameters while it computes (zero3); staging: the collectives' buffers (zero2/zero3 stage\n"
      "  a reduction only with train.grad_accum > 1). grads (zero2/zero3): from the backward to the update.\n"
      "  CPU float32 runs: c = 4, so the per-parameter bytes are 4 + 4 + 4 + k instead of 2 + 2 + 12.\n",
      (unsigned long long)input.compute_bytes);
  return 0;
}

}  // namespace zf
