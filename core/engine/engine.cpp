#include "engine/engine.hpp"

#include "data/data_source.hpp"
#include "model/hf_checkpoint.hpp"
#include "engine/evaluate.hpp"
#include "engine/export_options.hpp"
#include "engine/placement.hpp"
#include "engine/generate.hpp"
#include "plugin/plugin_set.hpp"
#include "report/rank_timers.hpp"
#include "report/report.hpp"
#include "report/run_stats.hpp"
#include "engine/schedule.hpp"
#include "params/sharded_grads.hpp"
#include "engine/stop_signal.hpp"
#include "params/residency.hpp"
#include "engine/run_lock.hpp"
#include "engine/run_setup.hpp"
#include "engine/run_options.hpp"
#include "engine/training_checkpoint.hpp"
#include "model/zoo.hpp"
#include "runtime/affinity.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/files_held.hpp"
#include "tokenizer/unicode.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"
#include "runtime/parallel.hpp"
#include "runtime/profile.hpp"

#include <csignal>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>

namespace zf {

namespace {

// The step's standard timers: fwd, bwd (the whole backward of a step's micro-batches), bwd_inner (autograd's
// backward, with the per-block hooks the stage runs in it), bwd_reduce (the stage's reduce_gradients after the
// last micro-batch: an all-reduce under zero0/1, the end of the reduce-scatter under zero2/3), step (the
// optimizer update). grad_reduce is zero2/3's per-block reduction inside bwd_inner. fwd_launch and bwd_launch are
// host time: the training thread queueing the forward and the backward (on a GPU, where one nears fwd or bwd
// the GPU waited for the host).
struct StandardTimers {
  uint32_t fwd, bwd, bwd_inner, bwd_reduce, step, fwd_launch, bwd_launch;
  explicit StandardTimers(Timers &t)
      : fwd(t.id("fwd")), bwd(t.id("bwd")), bwd_inner(t.id("bwd_inner")), bwd_reduce(t.id("bwd_reduce")),
        step(t.id("step")), fwd_launch(t.id("fwd_launch")), bwd_launch(t.id("bwd_launch")) {}
};

class Trainer {
 public:
  // `launched`: process_seconds() when the run began to set up its device (the launch before it:
  // loading libraries, MPI, reading the config).
  Trainer(const RunConfig &config, Runtime &runtime, PluginRegistry &registry, double launched, bool export_only)
      : export_only_(export_only), config_(config), runtime_(runtime), comm_(*runtime.comm), plugins_(config, runtime, registry),
        timers_(runtime.timers), options_(batch_for_resume(config, *runtime.comm)), stats_(runtime) {
    stats_.mark("launch", launched);
    stats_.mark("device_and_plugins");
    torch::manual_seed(options_.seed);
    ModelAndValues built = make_unallocated_model(config);  // memory once the plan is checked (Placement)
    model_ = std::move(built.model);
    data_ = export_only_ ? nullptr : make_data_source(config);  // an export reads no data (nor needs data.path)
    eval_data_ = export_only_ ? nullptr : make_data_source(config, Split::eval);
    ZF_REQUIRE(export_only_ || options_.eval_every == 0 || eval_data_ != nullptr, "%s: train.eval_every = %lld but "
               "the data has no held-out part; set data.eval_path (a file) or data.eval_fraction",
               config.where("train", "eval_every").str().c_str(), (long long)options_.eval_every);
    stats_.mark("model");
    flat_ = std::make_unique<FlatBuffers>(model_->parameters(), model_->block_names(), options_.column_major,
                                          options_.interleave_blocks);
    if (comm_.rank() == 0) check_output_paths(config, options_, export_only_);  // rank 0 writes them
    if (!export_only_)
      locks_ = take_run_directories(comm_, options_.output_dir, config_.string("checkpoint", "dir"),
                                    config_.string("run", "name"), config_.where("run", "name").str());
    const int64_t samples_per_step = options_.micro_batch * options_.grad_accum * comm_.world_size();
    const int64_t steps_per_epoch = data_ ? (data_->size() + samples_per_step - 1) / samples_per_step : 1;
    place_ = std::make_unique<Placement>(config, options_, runtime_, plugins_, *flat_, *model_, *built.values,
                                         steps_per_epoch, stats_);
    checkpoints_ = std::make_unique<TrainingCheckpoints>(config, options_.output_dir, runtime_, flat_->layout(),
                                                         run_identity(config, plugins_, options_, *place_, data_.get()));
    resume();
    stats_.mark("resume");
  }

  RunSummary run() {
    if (start_step_ >= options_.steps) return complete_run();
    const int64_t steps = options_.steps, warmup = options_.timing_warmup, checkpoint_every = options_.checkpoint_every;
    const std::string &output_dir = options_.output_dir;
    RunReport report(output_dir, comm_.rank() == 0, options_.progress, options_.log_every, options_.wall_clock_breakdown,
                     start_step_, options_.tensorboard);
    print_run_start(runtime_, model_->name(), flat_->layout(), place_->dtype, plugins_);
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
      profile_.at_step(step);  // ZF_PROFILE (runtime/profile.hpp)
      double loss = train_step(step);
      if (step == steps) update().finish_step();  // the last step's time includes the end of its update
      // and every step's time the GPU work it queued after reading the loss (its update, an all-gather)
      synchronize_stream(stream());
      synchronize_stream(runtime_.comm_stream);
      double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      ZF_REQUIRE(std::isfinite(loss), "step %lld: the loss is %f; %s. Lower optimizer.lr (%g), set "
                 "train.clip_grad_norm, or check the data", (long long)step, loss, checkpoints_->newest().c_str(),
                 options_.optimizer.lr);
      slowest_step_ms_ = std::max(slowest_step_ms_, step_ms);
      ++steps_timed_;
      set_comm_timeout(true);
      if (step == first_step) summary.initial_loss = checkpoints_->initial_loss(step, loss);  // a resumed run's too
      summary.final_loss = loss;
      if (step >= first_step + warmup || steps - first_step < warmup) {
        timed_ms += step_ms;
        ++timed_steps;
      }
      StepRecord r = record(step, steps, loss, step_ms);
      // ZenFlow's CPU updates still owed go in before the final evaluation, checkpoint and digest.
      if (step == steps) update().complete();
      if (options_.eval_every > 0 && (step % options_.eval_every == 0 || step == steps)) {
        update().drain();
        set_comm_timeout(false);
        r.eval_loss = evaluate();
        summary.eval_loss = r.eval_loss;
        set_comm_timeout(true);
      }
      report.step(r);
      summary.stop_signal = agreed_stop_signal();
      if (summary.stop_signal || (checkpoint_every > 0 && step % checkpoint_every == 0) ||
          (step == steps && options_.checkpoint_final)) {
        update().drain();
        set_comm_timeout(false);
        checkpoints_->save(step, update());
        report.write_html();
        set_comm_timeout(true);
      }
      if (summary.stop_signal) {
        report.stopped(summary.stop_signal, step);
        break;
      }
      report.show_progress();  // after the step's checkpoint line
    }
    set_comm_timeout(false);
    update().complete();
    stats_.mark("steps");
    summary.first_step = first_step;
    summary.steps = step;
    summary.mean_step_ms = timed_steps ? timed_ms / double(timed_steps) : 0;
    summary.param_digest = digest();
    stats_.mark("digest");
    summary.output_dir = held_path_now(output_dir);  // where its files are, if it was moved mid-run
    const std::string lost = report.finish(summary_json(summary, timed_steps));
    if (!summary.stop_signal) finish(step);
    ZF_REQUIRE(lost.empty(), "%s; the model is in the checkpoints and the export, as configured", lost.c_str());
    return summary;
  }

  // The checkpoint it resumed from is at train.steps already: nothing is trained, the reports of the run
  // that trained it stay as they are, one from elsewhere is saved here; export and sample as configured.
  RunSummary complete_run() {
    if (comm_.rank() == 0 && !export_only_)
      std::printf("zfcore: the run is complete: %s is at step %lld, train.steps = %lld; nothing to train (raise "
                  "train.steps to train further, or give a new run its own run.output_dir)\n",
                  checkpoints_->saved_path().c_str(), (long long)start_step_, (long long)options_.steps);
    RunSummary summary;
    summary.first_step = start_step_ + 1;
    summary.steps = start_step_;
    summary.output_dir = options_.output_dir;
    summary.param_digest = digest();
    if (options_.checkpoint_final) checkpoints_->save_converted(start_step_, update());
    finish(start_step_);
    return summary;
  }

  // After the last step (`step`): export the model and print a sample, as the config asks.
  void finish(int64_t step) {
    const std::string &export_dir = options_.export_hf;
    const SampleOptions &sample = options_.sample;
    if (!export_dir.empty() || sample.tokens > 0) residency().gather_whole_model();
    HfExportOptions export_options = run_export_options(config_, update().master(), &flat_->layout());
    // An fp32 export of a sharded master: rank 0 gathers the whole master (every rank takes part).
    if (!export_dir.empty() && export_options.dtype == "float32" && place_->shard_numel() < place_->padded_numel) {
      torch::Tensor whole = comm_.rank() == 0 ? torch::empty({int64_t(place_->padded_numel)}, torch::kFloat32) : torch::Tensor();
      for_each_master_slice(comm_, update().master(), place_->shard_begin, place_->shard_end, place_->padded_numel,
                            uint64_t(1) << 24, [&](uint64_t lo, uint64_t hi, const float *values) {
                              if (whole.defined()) std::memcpy(whole.data_ptr<float>() + lo, values, (hi - lo) * 4);
                            });
      export_options.master = whole;
    }
    std::string export_failed;
    if (!export_dir.empty() && comm_.rank() == 0) {
      try {
        require_export_ownership(export_dir);  // a file of the user's put there during the run
        save_hf_checkpoint(*model_, export_dir, export_options);
        std::printf("zfcore: exported the model in Hugging Face format to %s\n", export_dir.c_str());
      } catch (const std::exception &error) {
        export_failed = error.what();
      }
    }
    // A failed export must not lose the trained model: it goes into a checkpoint (if not there yet).
    if (!export_dir.empty()) export_failed = first_finding(comm_, export_failed);
    if (!export_failed.empty()) {
      if (checkpoints_->saved_step() != step) checkpoints_->save(step, update());
      throw Error(format("the export to %s failed: %s. The trained model is in the checkpoint %s: export it "
                         "again with %s (nothing is trained again)", export_dir.c_str(), export_failed.c_str(),
                         checkpoints_->saved_path().c_str(), export_only_ ? "zfcore export" : "checkpoint.export_hf = DIR"));
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
    BlockAccess access{[this](uint32_t block) { residency().enter(block, 0); },
                       [this](uint32_t block) { residency().leave(block, Residency::Pass::inference); }};
    return evaluate_loss(*model_, *eval_data_, runtime_, options_.micro_batch, options_.eval_batches, access).loss;
  }

 private:
  void *stream() const { return runtime_.compute_stream; }
  UpdatePlan &update() const { return *place_->update; }
  Residency &residency() const { return *place_->residency; }
  std::string digest() const {
    return param_digest(comm_, flat_->layout(), update().master(), place_->shard_begin, place_->shard_end,
                        place_->padded_numel);
  }

  void join_comm() const { stream_wait(stream(), runtime_.comm_stream); }

  // ---- Sharded gradients (a stage that wires reduce_block, ZeRO-2 and ZeRO-3) ----
  // A block's backward starts: its gradients (and those of blocks whose tied weights it reads)
  // need memory, and its parameters must be there.
  void start_block_backward(uint32_t block, int64_t step, const zf_step_buffers &b) {
    if (place_->grad_shards) {
      place_->grad_shards->hold(block);
      for (size_t tied : model_->tied_blocks(block)) place_->grad_shards->hold(uint32_t(tied));
    }
    residency().enter(block, step);
    residency().prefetch_after(block, -1, step);
    plugins_.stage.hook(StagePlugin::kBeforeBackward, block, b);
  }

  // A block's backward is done: the stage reduces its gradients into the owners' shards, then
  // its gradient memory and (sharded) parameters go.
  // On a GPU the reduction runs on the communication stream beside the next blocks' backward.
  void finish_block_backward(uint32_t block, const zf_step_buffers &b) {
    if (place_->accumulation && b.micro_step + 1 == b.micro_steps)  // the fp32 sum, for what follows
      place_->accumulation->fold_block(block, b.micro_step == 0);
    if (place_->grad_shards) place_->grad_shards->hold_shard();  // the step's first reduction (zeroed on the compute stream)
    zf_step_buffers comm = on_comm_stream(runtime_, b);
    if (place_->grad_shards) comm.grad_shard = view_of(place_->grad_shards->shard);
    plugins_.stage.hook(StagePlugin::kAfterBackward, block, comm);
    if (place_->grad_shards) {
      uint32_t timer = timers_.id("grad_reduce");  // reducing a block into the shards (GPU: comm stream)
      timers_.start(timer, comm.stream);
      comm.block_grads = place_->grad_shards->block_view(block);
      plugins_.stage.reduce_block(block, comm);
      timers_.stop(timer, comm.stream);
      place_->grad_shards->release(block, record_event(runtime_.comm_stream), stream());
    }
    // On the last micro-step a block's part of the shard is final once reduced (or right away with
    // one rank): an offloaded update starts copying it while earlier blocks still run backward.
    if (b.micro_step + 1 == b.micro_steps && (place_->grad_shards || comm_.world_size() == 1)) {
      const zf_block &range = flat_->layout().blocks[block];
      update().gradients_final(range.offset, range.offset + range.numel, comm.stream ? comm.stream : stream());
    }
    residency().leave(block, Residency::Pass::backward);
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

  // Continues from the checkpoint that checkpoint.resume names, if any.
  void resume() {
    start_step_ = checkpoints_->resume(update(), place_->params_shard());
    checkpoints_->check_saves(start_step_, options_.steps);
    if (start_step_ > 0) gather_parameters(start_step_);
  }

  // Ranks stop together: the largest signal number any rank received, or 0.
  int agreed_stop_signal() {
    int64_t signal[1] = {g_stop_signal.load()};
    comm_.all_reduce(zf_tensor_view{signal, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
    return int(signal[0]);
  }

  double train_step(int64_t step) {
    StandardTimers t(timers_);
    const StagePlugin &stage = plugins_.stage;
    double loss_sum = 0, aux_sum = 0;
    for (int64_t micro = 0; micro < options_.grad_accum; ++micro) {
      zf_step_buffers b = place_->buffers(step, uint32_t(micro));
      int64_t chunk = ((step - 1) * options_.grad_accum + micro) * comm_.world_size() + comm_.rank();
      Batch batch = on_device(data_->batch_of_step(step, chunk, options_.micro_batch), runtime_);
      stats_.count_batch(batch.samples, batch.tokens);

      if (micro == 0) stats_.note_device_memory("step_start");
      timers_.start(t.fwd, stream());
      timers_.start(t.fwd_launch);
      // Each block's backward is framed by hooks (gathers, reductions, an overlapped update): the
      // gradient of block b's output arriving means block b+1's backward is done and block b's is
      // about to start. The hooks live in the autograd graph, so no output is held here (a layer's
      // output that autograd does not save is freed); the last block returns the loss itself.
      const bool block_hooks = residency().sharded() || place_->grad_shards || stage.has_hook(StagePlugin::kBeforeBackward) ||
                               stage.has_hook(StagePlugin::kAfterBackward) || update().job().overlapped;
      torch::Tensor hidden = batch.inputs;
      size_t blocks = flat_->layout().block_count;
      for (size_t block = 0; block < blocks; ++block) {
        residency().enter(uint32_t(block), step);  // after the last step's update of the block
        residency().prefetch_after(uint32_t(block), +1, step);
        stage.hook(StagePlugin::kBeforeForward, uint32_t(block), b);
        hidden = block + 1 < blocks ? model_->forward_block(block, hidden, batch) : model_->forward_loss(hidden, batch);
        stage.hook(StagePlugin::kAfterForward, uint32_t(block), b);
        residency().leave(uint32_t(block), Residency::Pass::forward);
        if (block_hooks)
          hidden.register_hook([this, block, blocks, b, step](const torch::Tensor &) {
            if (block + 1 < blocks) finish_block_backward(uint32_t(block + 1), b);
            start_block_backward(uint32_t(block), step, b);
          });
      }
      torch::Tensor loss = std::move(hidden);
      timers_.stop(t.fwd_launch);
      timers_.stop(t.fwd, stream());
      if (micro == 0) update().forward_launched();
      stats_.note_device_memory("forward_end");
      if (micro == 0) begin_update(step);  // the previous step's update is complete from here on

      timers_.start(t.bwd, stream());
      timers_.start(t.bwd_inner, stream());
      timers_.start(t.bwd_launch);
      loss.backward();
      timers_.stop(t.bwd_launch);
      finish_block_backward(0, b);
      if (place_->accumulation)  // train.grad_accum_dtype = "float32"
        place_->accumulation->micro_step_done(micro == 0, micro + 1 == options_.grad_accum);
      if (place_->grad_shards) place_->grad_shards->release_all(stream());
      join_comm();
      timers_.stop(t.bwd_inner, stream());
      loss_sum += loss.item<double>();
      aux_sum += model_->aux_loss();  // NaN for a model without experts
      if (micro + 1 == options_.grad_accum) {
        b = place_->buffers(step, uint32_t(micro));  // the gradient shard is held now
        timers_.start(t.bwd_reduce, stream());
        stage.reduce_gradients(b);
        timers_.stop(t.bwd_reduce, stream());
      }
      timers_.stop(t.bwd, stream());
    }

    stats_.note_device_memory("backward_end");
    timers_.start(t.step, stream());
    optimizer_step(step);
    timers_.stop(t.step, stream());
    stats_.note_device_memory("step_end");
    // Attached and zeroed again at the next step's first reduction.
    if (place_->grad_shards) place_->grad_shards->release_shard();
    else if (!place_->accumulation) flat_->grads.zero_();  // (the fp32 sum's first fold replaces it)

    double reduced[2] = {loss_sum, aux_sum};
    zf_tensor_view view{reduced, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0};
    comm_.all_reduce(view, ZF_REDUCE_SUM, nullptr);
    stats_.aux_loss = reduced[1] / double(options_.grad_accum * comm_.world_size());  // means over micro-batches, ranks
    return reduced[0] / double(options_.grad_accum * comm_.world_size());
  }

  // The gradients are the sum over ranks and micro-steps: the update scales them to the mean and,
  // with clipping, by the global norm, which is known only after the backward.
  double mean_scale() const { return 1.0 / double(options_.grad_accum * comm_.world_size()); }

  void begin_update(int64_t step) {
    lr_ = options_.optimizer.lr * options_.schedule.factor(step);
    update().begin(step, lr_, place_->params_shard(), place_->grads_shard(), options_.clip_grad_norm <= 0,
                   float(mean_scale()));
  }

  void optimizer_step(int64_t step) {
    double clip = 1.0;
    if (options_.clip_grad_norm > 0) {
      grad_norm_ = place_->global_grad_norm() * mean_scale();
      ZF_REQUIRE(std::isfinite(grad_norm_), "step %lld: the gradients are not finite (global norm %g); the update is "
                 "not applied and the run stops; %s. Lower optimizer.lr (%g) or check the data", (long long)step,
                 grad_norm_, checkpoints_->newest().c_str(), options_.optimizer.lr);
      clip = std::min(1.0, options_.clip_grad_norm / (grad_norm_ + 1e-6));
    }
    update().finish(float(mean_scale()), float(clip), place_->defer_update);
    gather_parameters(step);
  }

  void gather_parameters(int64_t step) {
    if (plugins_.stage.gathers_parameters())
      plugins_.stage.gather_parameters(place_->buffers(step, uint32_t(options_.grad_accum - 1)));
    residency().gather_resident(step, /*lazily=*/place_->defer_update);
  }

  StepRecord record(int64_t step, int64_t steps, double loss, double step_ms) {
    StepRecord r = stats_.record(step, steps, loss, step_ms, options_.grad_accum);
    r.lr = lr_;
    r.grad_norm = options_.clip_grad_norm > 0 ? grad_norm_ : -1.0;
    r.update = update().events();
    if (options_.rank_timers) gather_rank_timers(comm_, r);
    return r;
  }

  std::string summary_json(const RunSummary &s, int64_t timed_steps) {
    stats_.selected_fraction = update().selected_fraction();
    stats_.update_facts = place_->facts();
    stats_.param_gathers.clear();
    const std::vector<int64_t> &gathers = residency().gather_counts();
    const std::vector<std::string> names = model_->block_names();
    for (size_t b = 0; b < gathers.size(); ++b) stats_.param_gathers.emplace_back(names[b], gathers[b]);
    RunStats::Facts facts{config_.file(), model_->name(), options_.micro_batch * options_.grad_accum * comm_.world_size(),
                          options_.eval_every > 0, &plugins_, &place_->memory_plan};
    return stats_.summary_json(s, timed_steps, facts);
  }

  bool export_only_;  // zfcore export: writes only checkpoint.export_hf
  const RunConfig &config_;
  Runtime &runtime_;
  Communicator &comm_;
  PluginSet plugins_;
  Timers &timers_;
  const RunOptions options_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataSource> data_, eval_data_;
  std::unique_ptr<FlatBuffers> flat_;
  std::unique_ptr<Placement> place_;  // after flat_, which it places
  RunStats stats_;
  double lr_ = 0, grad_norm_ = 0;  // this step's
  double slowest_step_ms_ = 0;     // of this run's steps so far (set_comm_timeout)
  int64_t steps_timed_ = 0;
  bool step_timeout_said_ = false;
  std::vector<std::unique_ptr<RunLock>> locks_;  // held until the run ends (locked by rank 0)
  std::unique_ptr<TrainingCheckpoints> checkpoints_;
  int64_t start_step_ = 0;
  StepProfile profile_;
};

}  // namespace

RunSummary train(const RunConfig &config, Runtime &runtime, PluginRegistry &registry, bool export_only) {
  const double launched = process_seconds();
  prepare_runtime(config, runtime);
  Trainer trainer(config, runtime, registry, launched, export_only);
  return trainer.run();
}

}  // namespace zf
