#include "engine/evaluate.hpp"

#include "checkpoint/checkpoint.hpp"
#include "engine/checkpoint_model.hpp"
#include "engine/finite_values.hpp"
#include "engine/run_setup.hpp"
#include "params/flat_buffers.hpp"
#include "engine/run_options.hpp"
#include "engine/training_checkpoint.hpp"
#include "memory/config_estimate.hpp"
#include "memory/memory_plan.hpp"
#include "model/zoo.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"

#include <algorithm>

namespace zf {

Batch on_device(Batch batch, const Runtime &runtime) {
  if (runtime.device != ZF_DEVICE_CUDA) return batch;
  torch::Device device(torch::kCUDA, c10::DeviceIndex(runtime.device_index));
  batch.inputs = batch.inputs.to(device);
  batch.targets = batch.targets.to(device);
  if (batch.packed.defined()) {
    batch.packed.positions = batch.packed.positions.to(device);
    batch.packed.starts = batch.packed.starts.to(device);
  }
  return batch;
}

EvalResult evaluate_loss(Model &model, DataSource &data, Runtime &runtime, int64_t micro_batch, int64_t max_batches,
                         const BlockAccess &access) {
  torch::NoGradGuard no_grad;
  model.train(false);
  Communicator &comm = *runtime.comm;
  const int64_t chunks = std::min<int64_t>((data.size() + micro_batch - 1) / micro_batch, max_batches);
  const size_t blocks = model.block_names().size();
  double sums[2] = {0, 0};  // loss * tokens, tokens
  // Every rank runs the same number of rounds: with sharded parameters each block's gather is a
  // collective, also on a rank whose share of the micro-batches has run out.
  const int64_t world = comm.world_size();
  for (int64_t round = 0; round < (chunks + world - 1) / world; ++round) {
    const int64_t chunk = round * world + comm.rank();
    const bool mine = chunk < chunks;
    Batch batch = mine ? on_device(data.batch(chunk, micro_batch), runtime) : Batch{};
    torch::Tensor hidden = batch.inputs;
    for (size_t block = 0; block < blocks; ++block) {
      if (access.enter) access.enter(uint32_t(block));
      if (mine) hidden = block + 1 < blocks ? model.forward_block(block, hidden, batch) : model.forward_loss(hidden, batch);
      if (access.leave) access.leave(uint32_t(block));
    }
    if (!mine) continue;
    const double counted = batch.targets.ne(kIgnoreIndex).sum().item<double>();
    sums[0] += hidden.item<double>() * counted;
    sums[1] += counted;
  }
  comm.all_reduce(zf_tensor_view{sums, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
  model.train(true);
  EvalResult result;
  result.loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  result.tokens = sums[1];
  result.batches = chunks;
  result.sequences = std::min(data.size(), chunks * micro_batch);
  return result;
}

namespace {

// The memory plan of an evaluation, checked before the parameters are allocated, as a run's is
// (engine/placement.cpp): every rank holds the whole model in the compute dtype, and a
// micro-batch's data (no activations are kept without gradients).
void check_eval_memory(const RunConfig &config, const RunOptions &options, const Runtime &runtime, uint64_t params,
                       zf_tier tier) {
  const MicroBatchMemory micro = micro_batch_memory(config);
  MemoryPlan plan;
  plan.buffers = {{tier, "params", params}, {ZF_TIER_HOST, "micro-batch data", micro.batch}};
  const HostMemoryLimit host = host_memory_limit(options.host_memory_limit_gb);
  const Communicator &comm = *runtime.comm;
  check_memory_plan(plan, host, comm.local_size(), tier == ZF_TIER_DEVICE ? device_free_bytes() : 0, [&] {
    std::string ways = "zfcore eval holds the whole model on every rank in model.dtype; what would fit: ";
    if (2 * micro.batch > plan.host_bytes()) ways += micro.advice + "; ";
    if (config.string("model", "dtype") != "bfloat16") ways += "model.dtype = \"bfloat16\" (halves it); ";
    return ways + "a smaller model, or a larger run.host_memory_limit_gb where the host has the memory";
  });
}

}  // namespace

EvalReport evaluate_config(const RunConfig &config, Runtime &runtime) {
  prepare_runtime(config, runtime);
  const RunOptions options = RunOptions::read(config);
  torch::manual_seed(options.seed);
  ModelAndValues built = make_unallocated_model(config);  // memory once the plan is checked, as a run's
  std::unique_ptr<Model> &model = built.model;  // built.values refers to it: both go together
  std::unique_ptr<DataSource> data = make_data_source(config, Split::eval);
  ZF_REQUIRE(data != nullptr,
             "%s: zfcore eval needs held-out data: set data.eval_path (a file of the same data.type) or "
             "data.eval_fraction",
             config.where("data", "eval_path").str().c_str());

  // The parameters in one flat buffer of the compute dtype, as a run holds them, without gradients.
  FlatBuffers flat(model->parameters(), model->block_names(), options.column_major, options.interleave_blocks);
  const uint64_t numel = flat.layout().numel;
  const zf_tier tier = runtime.device == ZF_DEVICE_CUDA ? ZF_TIER_DEVICE : ZF_TIER_HOST;
  check_eval_memory(config, options, runtime, numel * c10::elementSize(compute_dtype(config)), tier);
  flat.allocate_params(numel, compute_dtype(config), runtime.memory, tier, *built.values);
  built.values.reset();

  EvalReport report;
  report.available_sequences = data->size();
  if (auto checkpoint = checkpoint_to_resume(config, options.output_dir, *runtime.comm, false)) {
    check_same_model(*checkpoint, config, "evaluate");
    // The fp32 master, rounded to the compute dtype as a run's working parameters are.
    report.step = read_checkpoint_master(*checkpoint, layout_digest(flat.layout()),
                                         [&](uint64_t begin, const at::Tensor &values) {
                                           if (begin >= numel) return;
                                           int64_t n = std::min<int64_t>(values.numel(), int64_t(numel - begin));
                                           flat.params.narrow(0, int64_t(begin), n).copy_(values.narrow(0, 0, n));
                                         });
    report.weights = format("checkpoint %s (step %lld)", checkpoint->c_str(), (long long)report.step);
    const std::string bad = non_finite_parameter(flat.params, 0, flat.layout(), *runtime.comm);
    ZF_REQUIRE(bad.empty(), "%s: the saved weight %s is not finite; evaluate an earlier checkpoint "
               "(--set checkpoint.resume=DIR)", checkpoint->c_str(), bad.c_str());
  } else {
    const std::string init_from = config.string("model", "init_from");
    report.weights = init_from.empty() ? "the seeded initialization (no checkpoint, no model.init_from)"
                                       : "model.init_from " + init_from;
    runtime.comm->broadcast(view_of(flat.params), 0, runtime.compute_stream);  // rank 0's, as a run starts
  }
  report.result = evaluate_loss(*model, *data, runtime, options.micro_batch, options.eval_batches, {});
  return report;
}

}  // namespace zf
