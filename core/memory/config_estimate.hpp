// config_estimate.hpp: the memory estimate (memory_estimate.hpp) of a config, as `zfcore estimate`
// and `zfcore bench` compute it, before anything is built: its input, and every stage plugin's
// answer with the offload's. Block sizes come from the model's shape (linear_stack exactly;
// transformers from their parameter counts: embeddings, one block per layer, and the head).
#pragma once

#include "config/config.hpp"
#include "memory/memory_estimate.hpp"
#include "memory/memory_plan.hpp"
#include "model/activation_estimate.hpp"
#include "plugin/plugin_registry.hpp"

#include <string>
#include <vector>

namespace zf {

// Blocks of the config's model, its compute and optimizer-state bytes (the optimizer plugin's
// estimate) and gradient accumulation, on `world` ranks. what: the model in words; note: an
// assumption made (an optimizer without an estimate), or left.
EstimateInput estimate_input(const RunConfig &config, PluginRegistry &registry, uint64_t world, std::string *what,
                             std::string *note);

struct ConfigEstimate {
  EstimateInput input;
  std::string what, note;                // as estimate_input gives them
  std::string stage, offload;            // the config's plugins
  std::vector<PluginEstimate> stages;    // the built-in stages and the config's, by name
  std::vector<PluginEstimate> offloaded; // the offload plugin's answer for each of them
  size_t own = 0;                        // the config's own stage's index in stages and offloaded
  uint64_t stage_capabilities = 0;       // the config's own stage's ZF_CAP_* (sdk/include/zf/zf_plugin.h)
  uint64_t bucket_numel = 0;             // the offload plugin's bucket_size (elements; 0: none)
  // A transformer's activations on one rank (micro_batch x data.seq_len tokens a micro-step);
  // tokens == 0 for other models.
  uint64_t tokens = 0;
  ActivationEstimate activations;
  const PluginEstimate &own_stage() const { return stages.at(own); }      // the config's stage's answer
  const PluginEstimate &own_offload() const { return offloaded.at(own); }  // and where its offload puts it
};
// Loads the plugins (the config's plugin path included) and asks them.
ConfigEstimate estimate_config(const RunConfig &config, uint64_t world);

// The GPU's peak per rank: `device`, the bytes the config's own stage and offload keep where the
// model computes (with ZenFlow's, when it has them), and the activations, at the two moments the
// peak can fall on (model/activation_estimate.hpp). A stage that shards gradients
// (ZF_CAP_SHARD_GRADIENTS) holds its gradient shard (from the first reduction of the step: with
// train.grad_accum > 1, a micro-step's) and its blocks' gradients only in the backward
// (params/sharded_grads.hpp), so they are not there at the loss; in the backward a GPU
// run keeps the newest block's gradients until the next block's reduction releases them: one
// block more than the plugin's transient. The largest block stands for both. Without
// activations (not a transformer), `device`.
struct GpuPeak {
  uint64_t at_loss = 0, in_backward = 0;
  uint64_t bytes() const { return at_loss > in_backward ? at_loss : in_backward; }
};
GpuPeak estimate_gpu_peak(const ConfigEstimate &e, uint64_t device);

// What one micro-step takes beyond the parameters' buffers, from train.micro_batch: the batch's
// tensors (a transformer's ids and targets, int64; linear_stack's inputs and labels) and the
// activations its forward keeps (a transformer's peak, model/activation_estimate.hpp; linear_stack
// one hidden vector a layer a sample). A memory plan counts them (a CPU run's in host memory).
struct MicroBatchMemory {
  uint64_t batch = 0, activations = 0;
  uint64_t bytes() const { return batch + activations; }
  std::string advice;  // the keys that shrink them, with their values
};
MicroBatchMemory micro_batch_memory(const RunConfig &config);
// A micro-batch in a rank's memory plan: its data in host memory, its activations where the model
// computes (host memory on a CPU run, the GPU's on a GPU run: a GPU run that cannot hold them is refused
// before it allocates, as one whose buffers do not fit).
void plan_micro_batch(MemoryPlan &plan, const MicroBatchMemory &micro, bool on_gpu);

}  // namespace zf
