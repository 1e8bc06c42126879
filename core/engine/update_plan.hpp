// update_plan.hpp: the update of this rank's shard after the backward, laid out by the offload
// plugin. The host allocates every buffer of the update on the tier the offload plugin chose (fp32
// master, optimizer state, the gradients the optimizer reads, the compute-precision copy it
// writes) and hands the optimizer views of its state. The optimizer runs over the shard, either
// where the model computes (no offload: on the training thread) or on the host (offload: bucket by
// bucket on the update thread, gradients copied down and parameters copied up by the offload
// plugin on its own streams). With a [zenflow] table, ZenFlow (zenflow.hpp) splits the shard
// between a device job every step and a host job (HostJob) every few steps.
//
// Step protocol (training thread): begin() before the backward, then gradients_final() for ranges
// of the shard whose gradients are final (during the last micro-step's backward, when the plan
// overlaps), then finish() after the backward, which hands over what is left. finish() either
// waits for the whole update, or (defer = true) returns at once: the update thread goes on in
// forward order (the embedding, whose gradients are final last, first) while the next forward
// runs, and before each block's forward ready_for() makes the compute stream wait for that block's
// new parameters. drain() completes a deferred update; anything that reads the master or all
// parameters (checkpoints, evaluation, export, the next backward) drains first.
#pragma once

#include "checkpoint/safetensors.hpp"
#include "engine/plugin_set.hpp"
#include "runtime/runtime.hpp"

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zf {

struct OptimizerSettings {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// The optimizer over element ranges of the shard, on a device.
struct UpdateJob {
  zf_device device = ZF_DEVICE_CPU;
  std::vector<zf_optimizer_range> ranges;  // shard elements, sorted and disjoint
  bool overlapped = false;  // fed bucket by bucket during the backward, on the update thread
};

// Optimizer ranges over [begin, end) of the layout, in shard elements: group 0 decays, group 1
// (biases, norms) does not. A segment's range runs to the next segment, so padding merges into it.
std::vector<zf_optimizer_range> optimizer_ranges(const zf_layout &layout, uint64_t begin, uint64_t end);
// Appends [lo, hi) to sorted ranges, merged into the last one when adjacent and of the same group.
void append_range(std::vector<zf_optimizer_range> &ranges, uint64_t lo, uint64_t hi, uint32_t group);
// The part of `ranges` (sorted, disjoint) inside [begin, end).
std::vector<zf_optimizer_range> clip_ranges(const std::vector<zf_optimizer_range> &ranges, uint64_t begin,
                                            uint64_t end);

bool on_host(zf_tier tier);  // host memory, pinned or not

// One state tensor an optimizer lets the host hold (one element per parameter).
struct StateSpec {
  std::string name;
  torch::Dtype dtype;
};
// The optimizer's state_spec list (ABI 1.3) in spec order; empty when it keeps its own state.
std::vector<StateSpec> host_held_state(PluginInstance &optimizer);

// Bytes of the plan per tier and tag, known before anything is allocated (the memory plan).
struct PlannedBuffer {
  zf_tier tier;
  std::string tag;
  uint64_t bytes;
};

class DiskState;
class ZenFlow;
struct ZenFlowOptions;

// What the update thread works on: written by the training thread only while no job runs.
struct HostJob {
  std::vector<zf_optimizer_range> ranges;  // shard elements the CPU optimizer updates
  std::vector<zf_optimizer_group> groups;
  int64_t step = 0;                        // the optimizer's step count (bias correction)
  float scale = 1;                         // gradient scale (known once the thread may start)
  torch::Tensor grads;                     // shard gradients on the model's tier (copied down)
  torch::Tensor upload_to;                 // where the updated parameters go (model's tier)
  void *upload_after = nullptr;            // event the first upload waits for (NULL: none)
  bool copies_on_update_thread = false;    // ZenFlow: the update thread issues the copies down...
  void *grads_ready = nullptr;             // ... after this event (NULL on CPU runs)
  uint64_t begin = 0, end = 0;             // ZenFlow: the shard elements copied down and up
};

class UpdatePlan {
 public:
  // model_tier: where the model's parameters and gradients live (device on a GPU run).
  // zenflow: enabled = the ZenFlow schedule (zenflow.hpp) on top of this plan's CPU side.
  UpdatePlan(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end,
             torch::Dtype dtype, zf_tier model_tier, const OptimizerSettings &settings,
             const ZenFlowOptions &zenflow);
  ~UpdatePlan();
  UpdatePlan(const UpdatePlan &) = delete;
  UpdatePlan &operator=(const UpdatePlan &) = delete;

  // What allocate() will hold, per tier and tag.
  const std::vector<PlannedBuffer> &planned() const { return planned_; }
  // Allocates the buffers and binds the optimizer's state; master starts from params_shard.
  void allocate(const torch::Tensor &params_shard);

  torch::Tensor master;  // fp32 [shard_begin, shard_end), on the master tier
  const UpdateJob &job() const { return job_; }
  bool offloaded() const { return offloaded_; }
  // Where the working parameters live (the model's tier, or host memory under parameter offload),
  // and how many elements of the next blocks to copy ahead from there.
  zf_tier param_tier() const { return tiers_.param_tier; }
  uint64_t param_prefetch() const { return tiers_.prefetch_numel; }

  // Optimizer steps: params_shard and grads_shard are this rank's working parameters and reduced
  // gradients (compute dtype, on the model's tier); grad_scale is known at begin unless clipping
  // needs the global norm first (then pass scale_known = false and the scale to finish).
  void begin(int64_t step, double lr, const torch::Tensor &params_shard, const torch::Tensor &grads_shard,
             bool scale_known, float grad_scale);
  // Layout elements [begin, end) of gradients are final; `stream` has the work that made them so.
  void gradients_final(uint64_t begin, uint64_t end, void *stream);
  // mean_scale: 1 / (ranks * micro-steps); clip: the clipping factor (1 without clipping).
  void finish(float mean_scale, float clip, bool defer);
  // Layout elements [begin, end) are about to be read by the compute stream: after a deferred
  // finish, wait until the update thread has started their upload, and order the compute stream
  // after it. At once otherwise.
  void ready_for(uint64_t begin, uint64_t end);
  void drain();
  // Completes a deferred update (the step's own); ZenFlow's CPU update, which runs across steps
  // and is used at the next interval's end, goes on.
  void finish_step();
  // After the last step: drain, and (ZenFlow) apply what is still pending, so that the master and
  // the working parameters hold every gradient of the run.
  void complete();

  // The state for checkpoints (name, tensor), after a drain; ZenFlow's included.
  std::vector<std::pair<std::string, torch::Tensor>> state_tensors();
  // ... and the state on disk, read and written tile by tile (empty unless it is on disk).
  std::vector<TensorPieces> state_pieces();
  // After a checkpoint was loaded into state_tensors(): make the working parameters match it.
  void restore(const torch::Tensor &params_shard);

  // What the update did in the step just finished ("" without ZenFlow; else e.g. "select,gpu,cpu").
  std::string events() const;
  // Counters for summary.json: bytes copied down and up, ZenFlow's CPU updates and selections.
  std::vector<std::pair<std::string, double>> facts() const;
  double selected_fraction() const;

 private:
  class UpdateThread;
  struct Bucket {
    uint64_t begin, end;  // shard elements
    void *landed;         // event: its gradients are on the host
    uint64_t sequence;    // handed over as the sequence-th bucket of the step
  };
  friend class ZenFlow;
  // Copies down grads [begin, end) of host_job_ (shard elements) per bucket, queues their updates.
  void hand_over(uint64_t begin, uint64_t end, void *stream);
  // ZenFlow: a job over `job` on the update thread, which also issues the copies down.
  void start_host_job(HostJob job);
  void issue_copies();      // on the update thread
  void *job_copies_done();  // training thread: an event after the job's copies down (waits until issued)
  void update_bucket(const Bucket &bucket);                     // on the update thread
  void update_on_device(float grad_scale);                       // no offload, training thread
  uint64_t bucket_end(uint64_t lo, uint64_t end) const;  // the grid of bucket_size
  void step_on_host(std::vector<zf_optimizer_range> ranges, uint64_t base, uint64_t end);  // update thread
  void check_optimizer_fits();
  void wait_for_uploads();  // the compute stream waits for every upload started so far
  // The working parameters are the master itself (zero3 gathering from it): nothing to copy.
  bool params_are_master(const torch::Tensor &params_shard) const {
    return params_shard.data_ptr() == master.data_ptr();
  }
  void *transfers_done(int32_t direction);  // an event after the transfers of ZF_TRANSFER_*

  Runtime &runtime_;
  PluginSet &plugins_;
  uint64_t shard_begin_, shard_end_;
  torch::Dtype dtype_;
  zf_tier model_tier_;
  zf_offload_plan tiers_{};
  bool offloaded_ = false;
  UpdateJob job_;
  std::vector<zf_optimizer_group> groups_;
  std::vector<PlannedBuffer> planned_;
  std::vector<torch::Tensor> state_;
  std::vector<StateSpec> state_specs_;  // the optimizer's host-held state (empty: it keeps its own)
  torch::Tensor host_grads_;  // gradients the optimizer reads (offload), grad tier
  torch::Tensor params_out_;  // compute-precision copy the optimizer writes (offload, bf16/fp16 runs)
  bool writes_in_place_ = false;  // ... straight into the working parameters instead (parameter offload)
  std::unique_ptr<DiskState> disk_;  // the optimizer state on disk (NVMe tier), streamed in tiles
  std::unique_ptr<UpdateThread> thread_;  // after disk_: joined before disk_ goes
  std::unique_ptr<ZenFlow> zenflow_;
  uint64_t bytes_down_ = 0, bytes_up_ = 0;  // gradients copied down, parameters copied up

  // The step in progress.
  int64_t step_ = 0;
  bool scale_known_ = true;
  torch::Tensor params_shard_, grads_shard_;
  HostJob host_job_;  // the update thread's job
  void *copy_order_ = nullptr;   // ZenFlow: the stream the update thread orders its copies down on
  std::vector<void *> landed_;   // ZenFlow: per bucket, an event after its copy down
  std::vector<std::pair<uint64_t, uint64_t>> handed_;  // shard ranges handed over this step
  std::vector<Bucket> buckets_;                       // handed over this step, in order
  bool pending_ = false;                              // a deferred update is still running
  bool zenflow_job_ = false;                          // ... and it is ZenFlow's CPU update
};

}  // namespace zf
