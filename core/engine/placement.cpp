#include "engine/placement.hpp"

#include "update/zenflow_options.hpp"
#include "engine/training_checkpoint.hpp"
#include "memory/memory_estimate.hpp"
#include "model/zoo.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "runtime/tensors.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <cmath>

namespace zf {
namespace {

// The checkpoints before step 1: every rank's fp32 master and optimizer state of its shard, in one
// directory, keep + 1 of them at once, against the directory's free space or checkpoint.disk_limit_gb.
// Rank 0 prints the plan.
void check_checkpoints(const RunConfig &config, const RunOptions &options, const PluginSet &plugins,
                       uint64_t shard_numel, uint64_t world, bool print) {
  CheckpointDemand saves;
  uint64_t state_bytes = 0;
  for (const StateSpec &spec : plugins.optimizer.state_specs()) state_bytes += c10::elementSize(spec.dtype);
  if (state_bytes == 0) state_bytes = 8;  // an optimizer that keeps its own state: Adam's
  saves.directory = checkpoint_dir(config, options.output_dir);
  saves.state_per_rank = shard_numel * state_bytes;
  saves.bytes_per_rank = shard_numel * 4 + saves.state_per_rank;
  saves.world = world;
  saves.keep = config.integer("checkpoint", "keep");
  saves.copies = checkpoint_copies(options.steps, options.checkpoint_every, options.checkpoint_final, saves.keep);
  saves.existing = existing_checkpoint_bytes(saves.directory);
  saves.moments_halvable = moments_halvable(*plugins.optimizer.file().descriptor, state_bytes);
  const DiskSpace disk = disk_space(saves.directory, config.real("checkpoint", "disk_limit_gb"));
  if (print && saves.copies > 0) {
    std::printf("zfcore: checkpoints: %s each, up to %lld on disk at once in %s (%s: %s)\n",
                format_bytes(saves.checkpoint_bytes()).c_str(), (long long)saves.copies, saves.directory.c_str(),
                disk.source.c_str(), format_bytes(disk.bytes).c_str());
    std::fflush(stdout);
  }
  check_checkpoint_space(saves, disk);
}

}  // namespace

namespace {
// The most host memory this process has held so far (VmHWM), 0 where /proc does not say.
uint64_t peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10) * 1024;  // in kB
  return 0;
}
}  // namespace

Placement::Placement(const RunConfig &config, const RunOptions &options, Runtime &runtime, PluginSet &plugins,
                     FlatBuffers &flat, const Model &model, const ParameterSource &values, int64_t steps_per_epoch,
                     RunStats &stats)
    : options_(options), runtime_(runtime), flat_(flat) {
  const uint64_t peak_before = peak_rss_bytes();
  Communicator &comm = *runtime.comm;
  const zf_layout &layout = flat_.layout();
  const StagePlugin &stage = plugins.stage;
  std::vector<uint8_t> resident;
  const zf_stage_plan plan = stage.plan(layout, resident);
  uint64_t numel = std::max(layout.numel, plan.padded_numel);
  ZF_REQUIRE(plan.shard_begin <= plan.shard_end && plan.shard_end <= numel,
             "stage plugin '%s' planned the shard [%llu, %llu) outside the %llu-element buffers", stage.name(),
             (unsigned long long)plan.shard_begin, (unsigned long long)plan.shard_end, (unsigned long long)numel);
  shard_begin = plan.shard_begin;
  shard_end = plan.shard_end;
  dtype = compute_dtype(config);
  grad_dtype = reduced_grad_dtype(config, dtype);
  padded_numel = numel;
  update = std::make_unique<UpdatePlan>(runtime_, plugins, layout, shard_begin, shard_end, dtype, model_tier(),
                                        options_.optimizer, ZenFlowOptions::read(config, steps_per_epoch), grad_dtype);
  param_tier = update->param_tier();
  const bool sharded = stage.shards_parameters();
  check_memory(numel, plugins, sharded, resident, plan.prefetch_numel,
               micro_batch_memory(config));  // before anything large is allocated
  check_checkpoints(config, options_, plugins, shard_numel(), uint64_t(comm.world_size()), comm.rank() == 0);
  MemoryLedger &ledger = runtime_.memory;
  // A stage that gathers from the fp32 master where it lives beside the model (it converts as it
  // copies) needs no compute-precision copy of the shard.
  const bool from_master = sharded && stage.gathers_from_master() && !update->offloaded() && param_tier == model_tier();
  torch::Tensor shard_values;  // sharded: this rank's part of the parameters (the store, or the master's first values)
  if (sharded) {
    // Each rank fills only its shard, from the values' source (a part of the random draws or of
    // the checkpoint's bytes), all ranks at once: no rank ever holds the whole model.
    shard_values = ledger_tensor(ledger, param_tier, shard_numel(), dtype, from_master ? "params.initial" : "params.shard",
                                 /*zero=*/false);
    flat_.fill(values, shard_begin, shard_end, shard_values);
  } else {
    flat_.allocate_params(numel, dtype, ledger, param_tier, values);
    comm.broadcast(view_of(flat_.params), 0, runtime_.compute_stream);  // every rank starts from rank 0's
  }
  if (!stage.reduces_blocks()) flat_.allocate_grads(numel, dtype, ledger, model_tier());
  if (!stage.reduces_blocks() && grad_dtype != dtype)
    accumulation = std::make_unique<Fp32GradAccumulation>(
        flat_.grads, layout, ledger_tensor(ledger, model_tier(), numel, grad_dtype, "grads.fp32"));
  stats.mark("buffers");
  note_setup(config, values.bytes_read(), sharded, peak_rss_bytes() - std::min(peak_before, peak_rss_bytes()));
  update->allocate(sharded ? shard_values : flat_.params.narrow(0, int64_t(shard_begin), int64_t(shard_numel())));
  stats.mark("optimizer");
  // Before the residency: its first gathers hand the stage the step's buffers, gradients included.
  if (stage.reduces_blocks())
    grad_shards = std::make_unique<ShardedGradients>(flat_, runtime_.memory, model_tier(), dtype, shard_numel(),
                                                     grad_dtype);
  residency = std::make_unique<Residency>(stage, runtime_, flat_, model, model_tier(),
                                          [this](int64_t step) { return buffers(step, uint32_t(options_.grad_accum - 1)); });
  if (sharded) {
    ZF_REQUIRE(!from_master || update->master().device() == shard_values.device(),
               "internal: the master is not beside the parameters");
    residency->shard(shard_begin, from_master ? update->master() : shard_values, shard_begin == 0 && shard_end == numel,
                     dtype, std::move(resident), plan.prefetch_numel, /*stage_gathers=*/true);
  } else if (param_tier != model_tier()) {  // parameter offload: every block comes from host memory when used
    residency->shard(0, flat_.params, /*whole=*/true, dtype, std::vector<uint8_t>(layout.block_count, 0),
                     update->param_prefetch(), /*stage_gathers=*/false);
  }
  shard_values = torch::Tensor();
  // Without a gather after the update, the next forward can start while the update goes on: each
  // block's gather (ZeRO-3, parameter offload) first waits for this rank's part of the block.
  defer_update = !stage.gathers_parameters();
  residency->before_read([update = update.get()](uint64_t begin, uint64_t end) { update->ready_for(begin, end); });
  stats.mark("stage");
}

// Bytes per tier before anything large is allocated, printed, and refused when they cannot fit:
// host memory summed over the host's ranks, with the settings that would fit it. A micro-batch's
// data is host memory; its activations are where the model computes (host memory or the GPU's).
void Placement::check_memory(uint64_t numel, const PluginSet &plugins, bool sharded,
                             const std::vector<uint8_t> &resident, uint64_t prefetch_numel,
                             const MicroBatchMemory &micro) {
  const Communicator &comm = *runtime_.comm;
  const bool on_gpu = runtime_.device == ZF_DEVICE_CUDA;
  MemoryPlan &plan = memory_plan;
  const uint64_t element = c10::elementSize(dtype), model_bytes = numel * element;
  const zf_layout &layout = flat_.layout();
  uint64_t largest = 0;
  for (uint32_t b = 0; b < layout.block_count; ++b) largest = std::max(largest, layout.blocks[b].numel);
  if (sharded) {
    // The shard where the parameters are kept; blocks gathered around their use: the one computing,
    // a tied one and those gathered ahead (at most the stage's prefetch budget, on a GPU).
    uint64_t kept = 0;
    for (uint32_t b = 0; b < layout.block_count; ++b) kept += b < resident.size() && resident[b] ? layout.blocks[b].numel : 0;
    const uint64_t ahead = on_gpu ? std::min(prefetch_numel + largest, numel) : 0;
    plan.buffers = {{param_tier, "params.shard", shard_numel() * element},
                    {model_tier(), "params.gathered (at most)", std::min(numel, kept + 2 * largest + ahead) * element}};
  } else {
    plan.buffers = {{param_tier, "params", model_bytes}};
  }
  const uint64_t grad_element = c10::elementSize(grad_dtype);
  if (plugins.stage.reduces_blocks())  // the reduced shard, and the blocks whose backward is running or reducing
    plan.buffers.push_back({model_tier(), "grads.shard + grads.block (at most)",
                            shard_numel() * grad_element + std::min(numel, 3 * largest) * element +
                                (grad_dtype != dtype ? std::min(numel, largest) * grad_element : 0)});  // a widened piece
  else
    plan.buffers.push_back({model_tier(), "grads", model_bytes});
  if (!plugins.stage.reduces_blocks() && grad_dtype != dtype)  // their fp32 sum (train.grad_accum_dtype)
    plan.buffers.push_back({model_tier(), "grads.fp32", numel * grad_element});
  if (!sharded && param_tier != model_tier()) {  // parameter offload: a block and its tied one in use, (GPU) more copied ahead
    const uint64_t prefetch = update->param_prefetch();
    const uint64_t ahead = on_gpu && prefetch > 0 ? std::min(prefetch + largest, numel) : 0;
    plan.buffers.push_back({model_tier(), "params.gathered (at most)", (2 * largest + ahead) * element});
  }
  for (const PlannedBuffer &b : update->planned()) plan.buffers.push_back(b);
  plan_micro_batch(plan, micro, on_gpu);
  const uint64_t micro_here = on_gpu ? micro.batch : micro.bytes();
  HostMemoryLimit host = host_memory_limit(options_.host_memory_limit_gb);
  if (comm.rank() == 0) {
    std::string tiers;
    for (zf_tier t : {ZF_TIER_DEVICE, ZF_TIER_PINNED_HOST, ZF_TIER_HOST, ZF_TIER_NVME})
      if (plan.bytes(t)) tiers += format("%s%s %s", tiers.empty() ? "" : "; ", tier_name(t), plan.describe(t).c_str());
    std::printf("zfcore: memory plan per rank: %s; this host allows %s of host memory (%s) for %d rank(s)\n",
                tiers.c_str(), format_bytes(host.bytes).c_str(), host.source.c_str(), comm.local_size());
    std::fflush(stdout);
  }
  // check_memory_plan checks the host first: the advice it asks for then is the host's.
  const bool host_short = host.bytes > 0 && plan.host_bytes() * uint64_t(std::max(1, comm.local_size())) > host.bytes;
  check_memory_plan(plan, host, comm.local_size(), on_gpu ? device_free_bytes() : 0, [&] {
    std::string ways;
    if (host_short && 2 * micro_here > plan.host_bytes())  // the micro-batch's keys, not the state's
      ways = "Mostly the micro-batch: " + micro.advice + ". ";
    else if (host_short)
      ways = host_ways_out(host_demand(plan, plugins, comm.local_size(), uint64_t(comm.world_size())), host.bytes) + " ";
    else if (on_gpu && 2 * micro.activations > plan.bytes(ZF_TIER_DEVICE))  // the GPU's, mostly activations
      ways = "Mostly the micro-batch: " + micro.advice + " (or set model.activation_checkpointing = true). ";
    return ways + memory_advice(plugins, flat_.layout(), uint64_t(comm.world_size()), c10::elementSize(dtype),
                                uint64_t(options_.grad_accum), grad_element);
  });
}

// Under ZeRO-3 a rank reads only the checkpoint's bytes of its own shard (said per rank, and summed),
// and its host memory grows by its shard, not by the model.
void Placement::note_setup(const RunConfig &config, uint64_t bytes_read, bool sharded, uint64_t host_growth) {
  Communicator &comm = *runtime_.comm;
  const bool init_from = !config.string("model", "init_from").empty();
  if (init_from) {
    const std::string part = sharded ? format("its shard [%llu, %llu) of the parameters",
                                              (unsigned long long)shard_begin, (unsigned long long)shard_end)
                                     : std::string("all the parameters");
    std::printf("zfcore: rank %d read %s of model.init_from's weights for %s\n", comm.rank(),
                format_bytes(bytes_read).c_str(), part.c_str());
  }
  double sum[1] = {double(bytes_read)}, most[2] = {double(bytes_read), double(host_growth)};
  comm.all_reduce(zf_tensor_view{sum, 1, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
  comm.all_reduce(zf_tensor_view{most, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
  setup_facts_ = {{"parameters_host_peak_growth_bytes", most[1]}};
  if (init_from)
    setup_facts_.insert(setup_facts_.end(), {{"init_from_bytes_read", sum[0]}, {"init_from_bytes_read_max_rank", most[0]}});
}

std::vector<std::pair<std::string, double>> Placement::facts() const {
  std::vector<std::pair<std::string, double>> out = update->facts();
  out.insert(out.end(), setup_facts_.begin(), setup_facts_.end());
  return out;
}

zf_step_buffers Placement::buffers(int64_t step, uint32_t micro) const {
  zf_step_buffers b{};
  b.struct_size = sizeof b;
  b.micro_step = micro;
  b.micro_steps = uint32_t(options_.grad_accum);
  b.step = step;
  b.layout = &flat_.layout();
  // Whole-buffer views have data == NULL where no rank holds the whole buffer.
  zf_tensor_view absent{nullptr, padded_numel, abi_dtype(dtype), ZF_DEVICE_CPU, 0, 0};
  torch::Tensor whole = residency->sharded() ? residency->whole() : flat_.params;
  b.params = whole.defined() ? view_of(whole) : absent;
  b.param_shard = view_of(params_shard());
  b.grads = grad_shards ? absent : view_of(accumulation ? accumulation->sum() : flat_.grads);
  // Under sharded gradients the shard has memory from the step's first reduction to its update.
  zf_tensor_view no_shard{nullptr, shard_numel(), abi_dtype(grad_dtype), ZF_DEVICE_CPU, 0, 0};
  b.grad_shard = !grad_shards || grad_shards->shard_held() ? view_of(grads_shard()) : no_shard;
  b.stream = runtime_.compute_stream;
  return b;
}

// L2 norm of the summed gradients over all ranks. Each element is counted once even when
// several ranks own it (zero0: all of them), by dividing by how many ranks own each element.
double Placement::global_grad_norm() const {
  const torch::Tensor shard_grads = grads_shard();
  // In fp64, a slice at a time: a whole 7B shard in fp64 would need 56 GB of temporaries.
  constexpr int64_t kSlice = int64_t(1) << 26;
  torch::Tensor total = torch::zeros({}, shard_grads.options().dtype(torch::kFloat64));
  for (int64_t lo = 0; lo < shard_grads.numel(); lo += kSlice)
    total += shard_grads.narrow(0, lo, std::min(kSlice, shard_grads.numel() - lo)).to(torch::kFloat64).pow(2).sum();
  double sums[2] = {total.item<double>(), double(shard_numel())};
  runtime_.comm->all_reduce(zf_tensor_view{sums, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
  double owners = sums[1] / double(padded_numel);
  return std::sqrt(sums[0] / std::max(1.0, owners));
}

zf_tier Placement::model_tier() const { return runtime_.device == ZF_DEVICE_CUDA ? ZF_TIER_DEVICE : ZF_TIER_HOST; }

torch::Tensor Placement::params_shard() const {
  if (residency->sharded()) return residency->stored(shard_begin, shard_end);
  return flat_.params.narrow(0, int64_t(shard_begin), int64_t(shard_numel()));
}

torch::Tensor Placement::grads_shard() const {
  if (grad_shards) return grad_shards->shard;
  const torch::Tensor &grads = accumulation ? accumulation->sum() : flat_.grads;
  return grads.narrow(0, int64_t(shard_begin), int64_t(shard_numel()));
}

}  // namespace zf
