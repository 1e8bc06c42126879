#include "engine/engine.hpp"

#include "data/data_source.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "engine/flat_buffers.hpp"
#include "engine/evaluate.hpp"
#include "engine/generate.hpp"
#include "engine/plugin_set.hpp"
#include "engine/report.hpp"
#include "engine/run_stats.hpp"
#include "engine/schedule.hpp"
#include "engine/sharded_grads.hpp"
#include "engine/stop_signal.hpp"
#include "engine/residency.hpp"
#include "engine/run_lock.hpp"
#include "engine/run_options.hpp"
#include "engine/memory_estimate.hpp"
#include "engine/memory_plan.hpp"
#include "engine/training_checkpoint.hpp"
#include "engine/update_plan.hpp"
#include "engine/zenflow.hpp"
#include "model/transformer_shape.hpp"
#include "model/zoo.hpp"
#include "runtime/affinity.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "tokenizer/unicode.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/parallel.hpp"
#include "plugin/plugin_entry.hpp"

#include <csignal>
#include <cstring>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

namespace zf {

uint64_t digest_bytes(const void *data, size_t bytes, uint64_t state) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) {
    state ^= p[i];
    state *= 1099511628211ull;
  }
  return state;
}

namespace {

// SIGTERM, SIGINT and SIGHUP (a closed terminal, a scheduler's notice) ask for a checkpoint and a
// clean stop at the end of the current step. The first one is answered at once (rank 0), so that
// nobody presses Ctrl-C again: mpirun ends the ranks on a second one, before they can save.
// The step's standard timers: fwd, bwd (the whole backward of a step's micro-batches), bwd_inner
// (autograd's backward, with the per-block hooks the stage runs in it), bwd_reduce (the stage's
// reduce_gradients after the last micro-batch: an all-reduce under zero0/1, the end of the
// reduce-scatter under zero2/3), step (the optimizer update). grad_reduce is zero2/3's per-block
// reduction inside bwd_inner.
struct StandardTimers {
  uint32_t fwd, bwd, bwd_inner, bwd_reduce, step;
  explicit StandardTimers(Timers &t)
      : fwd(t.id("fwd")), bwd(t.id("bwd")), bwd_inner(t.id("bwd_inner")), bwd_reduce(t.id("bwd_reduce")),
        step(t.id("step")) {}
};

using StageHook = zf_status (*)(zf_object *, uint32_t, const zf_step_buffers *, zf_error *);

class Trainer {
 public:
  // `launched`: process_seconds() when the run began to set up its device (the launch before it:
  // loading libraries, MPI, reading the config).
  Trainer(const RunConfig &config, Runtime &runtime, PluginRegistry &registry, double launched)
      : config_(config), runtime_(runtime), comm_(*runtime.comm), plugins_(config, runtime, registry),
        timers_(runtime.timers), options_(RunOptions::read(config)), stats_(runtime) {
    stats_.mark("launch", launched);
    stats_.mark("device_and_plugins");
    torch::manual_seed(options_.seed);
    model_ = make_model(config);
    data_ = make_data_source(config);
    eval_data_ = make_data_source(config, Split::eval);
    ZF_REQUIRE(options_.eval_every == 0 || eval_data_ != nullptr,
               "%s: train.eval_every = %lld but the data has no held-out part; set data.eval_path (a file) or "
               "data.eval_fraction",
               config.where("train", "eval_every").str().c_str(), (long long)options_.eval_every);
    stats_.mark("model");
    flat_ = std::make_unique<FlatBuffers>(model_->parameters(), model_->block_names(), options_.column_major);
    if (comm_.rank() == 0) {  // rank 0 writes them
      check_output_paths(config, options_);
      lock_directories();
    }
    plan_buffers();
    checkpoints_ = std::make_unique<TrainingCheckpoints>(
        config, options_.output_dir, runtime_, flat_->layout(),
        TrainingCheckpoints::RunIdentity{config.file(), plugins_.stage.instance->name(),
                                         plugins_.optimizer.instance->name(), shard_begin_, shard_end_});
    resume();
    stats_.mark("resume");
  }

  RunSummary run() {
    if (start_step_ >= options_.steps) return complete_run();
    const int64_t steps = options_.steps, warmup = options_.timing_warmup, checkpoint_every = options_.checkpoint_every;
    const std::string &output_dir = options_.output_dir, &progress = options_.progress;
    // Under mpirun a rank's stdout is a pseudo-terminal whatever the user's is: no bar by default.
    bool show_progress = progress == "on" || (progress == "auto" && isatty(STDOUT_FILENO) && !launched_under_mpi());
    RunReport report(output_dir, comm_.rank() == 0, show_progress, options_.log_every, options_.wall_clock_breakdown,
                     start_step_);
    print_run_start(runtime_, model_->name(), flat_->layout(), dtype_, plugins_);
    if (comm_.rank() == 0) std::printf("zfcore: ready to train after %s\n", stats_.phases().c_str());

    RunSummary summary;
    double timed_ms = 0;
    int64_t timed_steps = 0;
    SignalGuard signals(comm_.rank() == 0);
    int64_t first_step = start_step_ + 1;
    int64_t step = start_step_;
    while (step < steps) {
      ++step;
      timers_.reset();
      auto started = std::chrono::steady_clock::now();
      double loss = train_step(step);
      if (step == steps) update_->finish_step();  // the last step's time includes the end of its update
      double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      ZF_REQUIRE(std::isfinite(loss), "step %lld: the loss is %f; %s. Lower optimizer.lr (%g), set "
                 "train.clip_grad_norm, or check the data", (long long)step, loss, checkpoints_->newest().c_str(),
                 options_.optimizer.lr);
      slowest_step_ms_ = std::max(slowest_step_ms_, step_ms);
      ++steps_timed_;
      set_comm_timeout(true);
      if (step == first_step) summary.initial_loss = loss;
      summary.final_loss = loss;
      if (step >= first_step + warmup || steps - first_step < warmup) {
        timed_ms += step_ms;
        ++timed_steps;
      }
      StepRecord r = record(step, steps, loss, step_ms);
      // ZenFlow's CPU updates still owed go in before the final evaluation, checkpoint and digest.
      if (step == steps) update_->complete();
      if (options_.eval_every > 0 && (step % options_.eval_every == 0 || step == steps)) {
        update_->drain();
        set_comm_timeout(false);
        r.eval_loss = evaluate();
        summary.eval_loss = r.eval_loss;
        set_comm_timeout(true);
      }
      report.step(r);
      summary.stop_signal = agreed_stop_signal();
      if (summary.stop_signal || (checkpoint_every > 0 && step % checkpoint_every == 0) ||
          (step == steps && options_.checkpoint_final)) {
        update_->drain();
        set_comm_timeout(false);
        checkpoints_->save(step, *update_);
        set_comm_timeout(true);
      }
      if (summary.stop_signal) {
        if (comm_.rank() == 0)
          std::printf("zfcore: stopped by signal %d after step %lld; resume with the same command\n",
                      summary.stop_signal, (long long)step);
        break;
      }
    }
    set_comm_timeout(false);
    update_->complete();
    stats_.mark("steps");
    summary.first_step = first_step;
    summary.steps = step;
    summary.mean_step_ms = timed_steps ? timed_ms / double(timed_steps) : 0;
    summary.param_digest = param_digest(comm_, flat_->layout(), update_->master, shard_begin_, shard_end_, padded_numel_);
    stats_.mark("digest");
    summary.output_dir = output_dir;
    const std::string lost = report.finish(summary_json(summary, timed_steps));
    if (!summary.stop_signal) finish(step);
    ZF_REQUIRE(lost.empty(), "%s; the model is in the checkpoints and the export, as configured", lost.c_str());
    return summary;
  }

  // The checkpoint it resumed from is at train.steps already: nothing is trained, and the reports
  // of the run that trained it stay as they are; the export and the sample are made as configured.
  RunSummary complete_run() {
    if (comm_.rank() == 0)
      std::printf("zfcore: the run is complete: %s is at step %lld, train.steps = %lld; nothing to train (raise "
                  "train.steps to train further, or give a new run its own run.output_dir)\n",
                  checkpoints_->saved_path().c_str(), (long long)start_step_, (long long)options_.steps);
    RunSummary summary;
    summary.first_step = start_step_ + 1;
    summary.steps = start_step_;
    summary.output_dir = options_.output_dir;
    summary.param_digest = param_digest(comm_, flat_->layout(), update_->master, shard_begin_, shard_end_, padded_numel_);
    finish(start_step_);
    return summary;
  }

  // After the last step (`step`): export the model and print a sample, as the config asks.
  void finish(int64_t step) {
    const std::string &export_dir = options_.export_hf;
    const SampleOptions &sample = options_.sample;
    if (!export_dir.empty() || sample.tokens > 0) residency_->gather_whole_model();
    HfExportOptions export_options = hf_export_options(config_, update_->master, &flat_->layout());
    // An fp32 export of a sharded master: rank 0 gathers the whole master (every rank takes part).
    if (!export_dir.empty() && export_options.dtype == "float32" && shard_numel() < padded_numel_) {
      torch::Tensor whole = comm_.rank() == 0 ? torch::empty({int64_t(padded_numel_)}, torch::kFloat32) : torch::Tensor();
      for_each_master_slice(comm_, update_->master, shard_begin_, shard_end_, padded_numel_, uint64_t(1) << 24,
                            [&](uint64_t lo, uint64_t hi, const float *values) {
                              if (whole.defined()) std::memcpy(whole.data_ptr<float>() + lo, values, (hi - lo) * 4);
                            });
      export_options.master = whole;
    }
    std::string export_failed;
    if (!export_dir.empty() && comm_.rank() == 0) {
      try {
        save_hf_checkpoint(*model_, export_dir, export_options);
        std::printf("zfcore: exported the model in Hugging Face format to %s\n", export_dir.c_str());
      } catch (const std::exception &error) {
        export_failed = error.what();
      }
    }
    // A failed export must not lose the trained model: it goes into a checkpoint (if not there yet).
    if (!export_dir.empty()) export_failed = first_finding(comm_, export_failed);
    if (!export_failed.empty()) {
      if (checkpoints_->saved_step() != step) checkpoints_->save(step, *update_);
      throw Error(format("the export to %s failed: %s. The trained model is in the checkpoint %s: export it "
                         "again with checkpoint.export_hf = DIR (nothing is trained again)",
                         export_dir.c_str(), export_failed.c_str(), checkpoints_->saved_path().c_str()));
    }
    if (sample.tokens > 0 && comm_.rank() == 0) {
      auto tokenizer = make_tokenizer(config_);
      // SIGTERM, SIGINT or SIGHUP while sampling: the model is saved, so the sample ends there.
      std::string text = generate(*model_, *tokenizer, sample, [] { return g_stop_signal != 0; });
      std::printf("zfcore: sample (%lld tokens, temperature %g):\n%s\n", (long long)sample.tokens, sample.temperature,
                  valid_utf8(text).c_str());  // a byte-level model may stop inside a character
      if (g_stop_signal) std::printf("zfcore: sample cut short by signal %d\n", int(g_stop_signal));
    }
    std::fflush(stdout);
  }

  // Mean loss per counted token over the held-out data (or its first eval_batches micro-batches),
  // across ranks: the computation of zfcore eval (evaluate.hpp), with the stage's block gathers.
  double evaluate() {
    BlockAccess access{[this](uint32_t block) { residency_->enter(block, 0); },
                       [this](uint32_t block) { residency_->leave(block, Residency::Pass::inference); }};
    return evaluate_loss(*model_, *eval_data_, runtime_, options_.micro_batch, options_.eval_batches, access).loss;
  }

 private:
  void plan_buffers() {
    const zf_layout &layout = flat_->layout();
    auto &stage = *plugins_.stage.instance;
    zf_stage_plan plan{};
    plan.struct_size = sizeof plan;
    std::vector<uint8_t> resident(layout.block_count, 1);
    plan.block_resident = resident.data();
    {
      zf_error error{};
      const PluginEntry running(stage, "plan");
      stage.check(stage.api<zf_stage_api>()->plan(stage.object(), &layout, &plan, &error), error, "plan");
    }
    uint64_t numel = std::max(layout.numel, plan.padded_numel);
    ZF_REQUIRE(plan.shard_begin <= plan.shard_end && plan.shard_end <= numel,
               "stage plugin '%s' planned the shard [%llu, %llu) outside the %llu-element buffers", stage.name(),
               (unsigned long long)plan.shard_begin, (unsigned long long)plan.shard_end, (unsigned long long)numel);
    shard_begin_ = plan.shard_begin;
    shard_end_ = plan.shard_end;
    dtype_ = compute_dtype(config_);
    padded_numel_ = numel;
    const int64_t samples_per_step = options_.micro_batch * options_.grad_accum * comm_.world_size();
    const int64_t steps_per_epoch = (data_->size() + samples_per_step - 1) / samples_per_step;
    update_ = std::make_unique<UpdatePlan>(runtime_, plugins_, layout, shard_begin_, shard_end_, dtype_, tier(),
                                           options_.optimizer, ZenFlowOptions::read(config_, steps_per_epoch));
    param_tier_ = update_->param_tier();
    check_memory(numel);
    flat_->materialize(numel, dtype_, runtime_.memory, tier(), /*with_grads=*/true, param_tier_);

    // Every rank starts from rank 0's parameters.
    comm_.broadcast(view_of(flat_->params), 0, runtime_.compute_stream);
    stats_.mark("buffers");
    update_->allocate(flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel())));
    stats_.mark("optimizer");
    residency_ = std::make_unique<Residency>(stage, runtime_, *flat_, *model_, tier(),
                                             [this](int64_t step) { return buffers(step, uint32_t(options_.grad_accum - 1)); });
    if (stage.file().descriptor->capabilities & ZF_CAP_SHARD_PARAMETERS) {
      // A stage of ABI 1.6 gathers from the fp32 master where it lives beside the model (it
      // converts as it copies): no compute-precision copy of the shard is kept.
      const bool from_master = ZF_ABI_MINOR_OF(stage.file().abi_version) >= 6 && !update_->offloaded() &&
                               param_tier_ == tier() && update_->master.device() == flat_->params.device();
      residency_->shard(shard_begin_, shard_end_, param_tier_, std::move(resident), plan.prefetch_numel,
                        /*stage_gathers=*/true, from_master ? update_->master : torch::Tensor());
    }
    else if (param_tier_ != tier())  // parameter offload: every block comes from host memory when used
      residency_->shard(0, numel, param_tier_, std::vector<uint8_t>(layout.block_count, 0),
                        update_->param_prefetch(), /*stage_gathers=*/false);
    if (stage_reduce_block()) grad_shards_ = std::make_unique<ShardedGradients>(*flat_, runtime_.memory, tier(), shard_numel());
    // Without a gather after the update, the next forward can start while the update goes on.
    defer_update_ = !stage.api<zf_stage_api>()->gather_parameters && !residency_->sharded();
    stats_.mark("stage");
  }

  // Bytes per tier before anything large is allocated, printed, and refused when they cannot fit.
  void check_memory(uint64_t numel) {
    MemoryPlan &plan = memory_plan_;
    uint64_t model_bytes = numel * c10::elementSize(dtype_);
    plan.buffers = {{param_tier_, "params", model_bytes}, {tier(), "grads", model_bytes}};
    if (param_tier_ != tier()) {  // parameter offload: a block and its tied one in use, (GPU) more copied ahead
      const zf_layout &layout = flat_->layout();
      uint64_t largest = 0;
      for (uint32_t b = 0; b < layout.block_count; ++b) largest = std::max(largest, layout.blocks[b].numel);
      const uint64_t prefetch = update_->param_prefetch();
      const uint64_t ahead = on_gpu() && prefetch > 0 ? std::min(prefetch + largest, numel) : 0;
      plan.buffers.push_back({tier(), "params.gathered (at most)", (2 * largest + ahead) * c10::elementSize(dtype_)});
    }
    for (const PlannedBuffer &b : update_->planned()) plan.buffers.push_back(b);
    HostMemoryLimit host = host_memory_limit(options_.host_memory_limit_gb);
    if (comm_.rank() == 0) {
      std::string tiers;
      for (zf_tier t : {ZF_TIER_DEVICE, ZF_TIER_PINNED_HOST, ZF_TIER_HOST, ZF_TIER_NVME})
        if (plan.bytes(t)) tiers += format("%s%s %s", tiers.empty() ? "" : "; ", tier_name(t), plan.describe(t).c_str());
      std::printf("zfcore: memory plan per rank: %s; this host allows %s of host memory (%s) for %d rank(s)\n",
                  tiers.c_str(), format_bytes(host.bytes).c_str(), host.source.c_str(), comm_.local_size());
      std::fflush(stdout);
    }
    check_memory_plan(plan, host, comm_.local_size(), on_gpu() ? device_free_bytes() : 0,
                      [this] {
                        return memory_advice(plugins_, flat_->layout(), uint64_t(comm_.world_size()),
                                             c10::elementSize(dtype_), uint64_t(options_.grad_accum));
                      });
  }

  uint64_t shard_numel() const { return shard_end_ - shard_begin_; }
  bool on_gpu() const { return runtime_.device == ZF_DEVICE_CUDA; }
  zf_tier tier() const { return on_gpu() ? ZF_TIER_DEVICE : ZF_TIER_HOST; }  // of the model's buffers
  void *stream() const { return runtime_.compute_stream; }

  void join_comm() const { stream_wait(stream(), runtime_.comm_stream); }

  // ---- Sharded gradients (a stage that wires reduce_block, ZeRO-2 and ZeRO-3) ----
  // The stage's reduce_block entry (ABI 1.1), or NULL.
  StageHook stage_reduce_block() const {
    const auto *api = plugins_.stage.instance->api<zf_stage_api>();
    if (api->struct_size < offsetof(zf_stage_api, reduce_block) + sizeof(void *)) return nullptr;
    return api->reduce_block;
  }

  // This rank's shard of the (reduced) gradients, wherever they live.
  torch::Tensor grads_shard() const {
    if (grad_shards_) return grad_shards_->shard;
    return flat_->grads.narrow(0, int64_t(shard_begin_), int64_t(shard_numel()));
  }

  // A block's backward starts: its gradients (and those of blocks whose tied weights it reads)
  // need memory, and its parameters must be there.
  void start_block_backward(uint32_t block, int64_t step, const zf_step_buffers &b) {
    if (grad_shards_) {
      grad_shards_->hold(block);
      for (size_t tied : model_->tied_blocks(block)) grad_shards_->hold(uint32_t(tied));
    }
    residency_->enter(block, step);
    residency_->prefetch_after(block, -1, step);
    call_hook(plugins_.stage.instance->api<zf_stage_api>()->before_backward, "before_backward", block, b);
  }

  // A block's backward is done: the stage reduces its gradients into the owners' shards, then
  // its gradient memory and (sharded) parameters go.
  // On a GPU the reduction runs on the communication stream beside the next blocks' backward.
  void finish_block_backward(uint32_t block, const zf_step_buffers &b) {
    if (grad_shards_) grad_shards_->hold_shard();  // the step's first reduction (zeroed on the compute stream)
    zf_step_buffers comm = on_comm_stream(runtime_, b);
    if (grad_shards_) comm.grad_shard = view_of(grad_shards_->shard);
    call_hook(plugins_.stage.instance->api<zf_stage_api>()->after_backward, "after_backward", block, comm);
    if (grad_shards_) {
      uint32_t timer = timers_.id("grad_reduce");  // reducing a block into the shards (GPU: comm stream)
      timers_.start(timer, comm.stream);
      comm.block_grads = grad_shards_->block_view(block);
      call_hook(stage_reduce_block(), "reduce_block", block, comm);
      timers_.stop(timer, comm.stream);
      grad_shards_->release(block, record_event(runtime_.comm_stream), stream());
    }
    // On the last micro-step a block's part of the shard is final once reduced (or right away with
    // one rank): an offloaded update starts copying it while earlier blocks still run backward.
    if (b.micro_step + 1 == b.micro_steps && (grad_shards_ || comm_.world_size() == 1)) {
      const zf_block &range = flat_->layout().blocks[block];
      update_->gradients_final(range.offset, range.offset + range.numel, comm.stream ? comm.stream : stream());
    }
    residency_->leave(block, Residency::Pass::backward);
  }

  // This rank's shard of the working parameters, wherever they live.
  torch::Tensor params_shard() const {
    if (residency_->sharded()) return residency_->stored(shard_begin_, shard_end_);
    return flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel()));
  }

  // run.comm_timeout_s = 0: collectives outside the steps (checkpoints, evaluations, the export)
  // wait the default (ZF_COMM_TIMEOUT_S, 600 s); those of the steps, once three steps are timed, 20 x
  // the slowest step (at least 60 s), so that a stopped or lost rank is found in about a minute.
  void set_comm_timeout(bool in_steps) {
    if (options_.comm_timeout_s > 0 || steps_timed_ < 3) return;  // fixed by the config, or too few steps timed
    double seconds = comm_timeout_s();
    if (in_steps) seconds = std::min(seconds, std::max(60.0, 20 * slowest_step_ms_ / 1e3));
    if (in_steps && !step_timeout_said_ && comm_.rank() == 0 && comm_.world_size() > 1) {
      std::printf("zfcore: during the steps a collective waits at most %.0f s for its peers (20 x the slowest "
                  "step, at least 60 s; run.comm_timeout_s sets it)\n", seconds);
      step_timeout_said_ = true;
    }
    comm_.set_timeout_s(seconds);
  }

  // One run per directory: rank 0 locks the output directory, and checkpoint.dir where it is another.
  void lock_directories() {
    locks_.push_back(std::make_unique<RunLock>(options_.output_dir,
                                               format("run.output_dir = \"%s\"", options_.output_dir.c_str())));
    const std::string checkpoints = config_.string("checkpoint", "dir");
    std::error_code ec;
    if (!checkpoints.empty() && !std::filesystem::equivalent(checkpoints, options_.output_dir, ec))
      locks_.push_back(std::make_unique<RunLock>(checkpoints, format("checkpoint.dir = \"%s\"", checkpoints.c_str())));
  }

  // Continues from the checkpoint that checkpoint.resume names, if any.
  void resume() {
    start_step_ = checkpoints_->resume(*update_);
    if (start_step_ == 0) return;
    update_->restore(params_shard());
    gather_parameters(start_step_);
  }

  // Ranks stop together: the largest signal number any rank received, or 0.
  int agreed_stop_signal() {
    int64_t signal[1] = {g_stop_signal.load()};
    comm_.all_reduce(zf_tensor_view{signal, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
    return int(signal[0]);
  }

  zf_step_buffers buffers(int64_t step, uint32_t micro) const {
    zf_step_buffers b{};
    b.struct_size = sizeof b;
    b.micro_step = micro;
    b.micro_steps = uint32_t(options_.grad_accum);
    b.step = step;
    b.layout = &flat_->layout();
    // Whole-buffer views have data == NULL where no rank holds the whole buffer.
    zf_tensor_view absent{nullptr, padded_numel_, abi_dtype(dtype_), ZF_DEVICE_CPU, 0, 0};
    torch::Tensor whole = residency_->sharded() ? residency_->whole() : flat_->params;
    b.params = whole.defined() ? view_of(whole) : absent;
    b.param_shard = view_of(params_shard());
    b.grads = grad_shards_ ? absent : view_of(flat_->grads);
    // Under sharded gradients the shard has memory from the step's first reduction to its update.
    zf_tensor_view no_shard{nullptr, shard_numel(), abi_dtype(dtype_), ZF_DEVICE_CPU, 0, 0};
    b.grad_shard = !grad_shards_ || grad_shards_->shard_held() ? view_of(grads_shard()) : no_shard;
    b.stream = runtime_.compute_stream;
    return b;
  }

  void call_hook(StageHook hook, const char *name, uint32_t block, const zf_step_buffers &b) {
    if (!hook) return;
    zf_error error{};
    auto &stage = *plugins_.stage.instance;
    const PluginEntry running(stage, name);
    stage.check(hook(stage.object(), block, &b, &error), error, name);
  }

  double train_step(int64_t step) {
    StandardTimers t(timers_);
    const auto *stage_api = plugins_.stage.instance->api<zf_stage_api>();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < options_.grad_accum; ++micro) {
      zf_step_buffers b = buffers(step, uint32_t(micro));
      int64_t chunk = ((step - 1) * options_.grad_accum + micro) * comm_.world_size() + comm_.rank();
      Batch batch = on_device(data_->batch(chunk, options_.micro_batch), runtime_);
      stats_.count_batch(batch.samples, batch.tokens);

      if (micro == 0) stats_.note_device_memory("step_start");
      timers_.start(t.fwd, stream());
      // Each block's backward is framed by hooks (gathers, reductions, an overlapped update): the
      // gradient of block b's output arriving means block b+1's backward is done and block b's is
      // about to start. The hooks live in the autograd graph, so no output is held here: a
      // layer's output that autograd does not save, and the logits once the loss has them, are
      // freed as in a plain torch forward.
      const bool block_hooks = residency_->sharded() || grad_shards_ || stage_api->before_backward ||
                               stage_api->after_backward || update_->job().overlapped;
      torch::Tensor hidden = batch.inputs;
      size_t blocks = flat_->layout().block_count;
      for (size_t block = 0; block < blocks; ++block) {
        const zf_block &range = flat_->layout().blocks[block];
        update_->ready_for(range.offset, range.offset + range.numel);  // the last step's update of the block
        residency_->enter(uint32_t(block), step);
        residency_->prefetch_after(uint32_t(block), +1, step);
        call_hook(stage_api->before_forward, "before_forward", uint32_t(block), b);
        hidden = model_->forward_block(block, hidden, batch);
        call_hook(stage_api->after_forward, "after_forward", uint32_t(block), b);
        residency_->leave(uint32_t(block), Residency::Pass::forward);
        if (block_hooks)
          hidden.register_hook([this, block, blocks, b, step](const torch::Tensor &) {
            if (block + 1 < blocks) finish_block_backward(uint32_t(block + 1), b);
            start_block_backward(uint32_t(block), step, b);
          });
      }
      torch::Tensor loss = model_->loss(hidden, batch);
      hidden = torch::Tensor();
      timers_.stop(t.fwd, stream());
      stats_.note_device_memory("forward_end");
      if (micro == 0) begin_update(step);  // the previous step's update is complete from here on

      timers_.start(t.bwd, stream());
      timers_.start(t.bwd_inner, stream());
      loss.backward();
      finish_block_backward(0, b);
      if (grad_shards_) grad_shards_->release_all(stream());
      join_comm();
      timers_.stop(t.bwd_inner, stream());
      loss_sum += loss.item<double>();
      if (micro + 1 == options_.grad_accum) {
        b = buffers(step, uint32_t(micro));  // the gradient shard is held now
        timers_.start(t.bwd_reduce, stream());
        zf_error error{};
        auto &stage = *plugins_.stage.instance;
        const PluginEntry running(stage, "reduce_gradients");
        stage.check(stage_api->reduce_gradients(stage.object(), &b, &error), error, "reduce_gradients");
        timers_.stop(t.bwd_reduce, stream());
      }
      timers_.stop(t.bwd, stream());
    }

    stats_.note_device_memory("backward_end");
    timers_.start(t.step, stream());
    optimizer_step(step);
    timers_.stop(t.step, stream());
    stats_.note_device_memory("step_end");
    if (grad_shards_) grad_shards_->release_shard();  // attached and zeroed again at the next step's first reduction
    else flat_->grads.zero_();

    // The reported loss is the mean over micro-batches and ranks.
    double reduced[1] = {loss_sum};
    zf_tensor_view view{reduced, 1, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0};
    comm_.all_reduce(view, ZF_REDUCE_SUM, nullptr);
    return reduced[0] / double(options_.grad_accum * comm_.world_size());
  }

  // The gradients are the sum over ranks and micro-steps: the update scales them to the mean and,
  // with clipping, by the global norm, which is known only after the backward.
  double mean_scale() const { return 1.0 / double(options_.grad_accum * comm_.world_size()); }

  void begin_update(int64_t step) {
    lr_ = options_.optimizer.lr * options_.schedule.factor(step);
    update_->begin(step, lr_, params_shard(), grads_shard(), options_.clip_grad_norm <= 0, float(mean_scale()));
  }

  void optimizer_step(int64_t step) {
    double clip = 1.0;
    if (options_.clip_grad_norm > 0) {
      grad_norm_ = global_grad_norm(grads_shard()) * mean_scale();
      ZF_REQUIRE(std::isfinite(grad_norm_), "step %lld: the gradients are not finite (global norm %g); the update is "
                 "not applied and the run stops; %s. Lower optimizer.lr (%g) or check the data", (long long)step,
                 grad_norm_, checkpoints_->newest().c_str(), options_.optimizer.lr);
      clip = std::min(1.0, options_.clip_grad_norm / (grad_norm_ + 1e-6));
    }
    update_->finish(float(mean_scale()), float(clip), defer_update_);
    gather_parameters(step);
  }

  void gather_parameters(int64_t step) {
    auto &stage = *plugins_.stage.instance;
    if (auto gather = stage.api<zf_stage_api>()->gather_parameters) {
      zf_error error{};
      zf_step_buffers b = buffers(step, uint32_t(options_.grad_accum - 1));
      const PluginEntry running(stage, "gather_parameters");
      stage.check(gather(stage.object(), &b, &error), error, "gather_parameters");
    }
    residency_->gather_resident(step);
  }

  // L2 norm of the summed gradients over all ranks. Each element is counted once even when
  // several ranks own it (zero0: all of them), by dividing by how many ranks own each element.
  double global_grad_norm(const torch::Tensor &shard_grads) {
    // In fp64, a slice at a time: a whole 7B shard in fp64 would need 56 GB of temporaries.
    constexpr int64_t kSlice = int64_t(1) << 26;
    torch::Tensor total = torch::zeros({}, shard_grads.options().dtype(torch::kFloat64));
    for (int64_t lo = 0; lo < shard_grads.numel(); lo += kSlice)
      total += shard_grads.narrow(0, lo, std::min(kSlice, shard_grads.numel() - lo)).to(torch::kFloat64).pow(2).sum();
    double sums[2] = {total.item<double>(), double(shard_numel())};
    comm_.all_reduce(zf_tensor_view{sums, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
    double owners = sums[1] / double(padded_numel_);
    return std::sqrt(sums[0] / std::max(1.0, owners));
  }

  StepRecord record(int64_t step, int64_t steps, double loss, double step_ms) {
    StepRecord r = stats_.record(step, steps, loss, step_ms, options_.grad_accum);
    r.lr = lr_;
    r.grad_norm = options_.clip_grad_norm > 0 ? grad_norm_ : -1.0;
    r.update = update_->events();
    return r;
  }

  std::string summary_json(const RunSummary &s, int64_t timed_steps) {
    stats_.selected_fraction = update_->selected_fraction();
    stats_.update_facts = update_->facts();
    stats_.param_gathers.clear();
    const std::vector<int64_t> &gathers = residency_->gather_counts();
    const std::vector<std::string> names = model_->block_names();
    for (size_t b = 0; b < gathers.size(); ++b) stats_.param_gathers.emplace_back(names[b], gathers[b]);
    RunStats::Facts facts{config_.file(), model_->name(), options_.micro_batch * options_.grad_accum * comm_.world_size(),
                          options_.eval_every > 0, &plugins_, &memory_plan_};
    return stats_.summary_json(s, timed_steps, facts);
  }

  const RunConfig &config_;
  Runtime &runtime_;
  Communicator &comm_;
  PluginSet plugins_;
  Timers &timers_;
  const RunOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataSource> data_, eval_data_;
  std::unique_ptr<FlatBuffers> flat_;
  std::unique_ptr<Residency> residency_;  // parameters of blocks gathered around their use (ZeRO-3, cpu_full)
  zf_tier param_tier_ = ZF_TIER_DEVICE;   // where the working parameters live (the offload plan's param_tier)
  std::unique_ptr<ShardedGradients> grad_shards_;  // only under a stage that reduces per block
  uint64_t padded_numel_ = 0;  // elements of the flat buffers (>= layout numel)
  torch::Dtype dtype_ = torch::kFloat32;
  std::unique_ptr<UpdatePlan> update_;
  bool defer_update_ = false;  // the next forward overlaps the end of the update (UpdatePlan::finish)
  MemoryPlan memory_plan_;
  uint64_t shard_begin_ = 0, shard_end_ = 0;
  RunStats stats_;
  double lr_ = 0, grad_norm_ = 0;  // this step's
  double slowest_step_ms_ = 0;     // of this run's steps so far (set_comm_timeout)
  int64_t steps_timed_ = 0;
  bool step_timeout_said_ = false;
  std::vector<std::unique_ptr<RunLock>> locks_;  // rank 0: held until the run ends
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  int64_t start_step_ = 0;
};

}  // namespace

RunSummary train(const RunConfig &config, Runtime &runtime, PluginRegistry &registry) {
  const double launched = process_seconds();
  prepare_runtime(config, runtime);
  Trainer trainer(config, runtime, registry, launched);
  return trainer.run();
}

}  // namespace zf
