#include "engine/engine.hpp"

#include "checkpoint/checkpoint.hpp"
#include "data/data_source.hpp"
#include "checkpoint/hf_checkpoint.hpp"
#include "engine/flat_buffers.hpp"
#include "engine/generate.hpp"
#include "engine/plugin_set.hpp"
#include "engine/report.hpp"
#include "engine/schedule.hpp"
#include "engine/sharded_grads.hpp"
#include "engine/sharded_params.hpp"
#include "model/zoo.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>

#include <csignal>
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

// SIGTERM/SIGINT ask for a checkpoint and a clean stop at the end of the current step.
std::atomic<int> g_stop_signal{0};
extern "C" void request_stop(int signal) { g_stop_signal = signal; }

struct SignalGuard {
  struct sigaction previous_term {}, previous_int {};
  SignalGuard() {
    g_stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = request_stop;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, &previous_term);
    sigaction(SIGINT, &action, &previous_int);
  }
  ~SignalGuard() {
    sigaction(SIGTERM, &previous_term, nullptr);
    sigaction(SIGINT, &previous_int, nullptr);
  }
};

struct StandardTimers {
  uint32_t fwd, bwd, bwd_inner, bwd_allreduce, step;
  explicit StandardTimers(Timers &t)
      : fwd(t.id("fwd")), bwd(t.id("bwd")), bwd_inner(t.id("bwd_inner")), bwd_allreduce(t.id("bwd_allreduce")),
        step(t.id("step")) {}
};

// Optimizer ranges over this rank's shard: group 0 decays, group 1 (biases, norms) does not.
// A segment's range runs to the next segment so that padding merges into it.
std::vector<zf_optimizer_range> optimizer_ranges(const zf_layout &layout, uint64_t begin, uint64_t end) {
  std::vector<zf_optimizer_range> ranges;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &s = layout.segments[i];
    uint64_t seg_end = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : end;
    uint64_t lo = std::max(s.offset, begin), hi = std::min(seg_end, end);
    if (i == 0) lo = begin;  // leading elements of the shard belong to the first segment
    if (lo >= hi) continue;
    uint32_t group = (s.flags & ZF_SEGMENT_NO_DECAY) ? 1 : 0;
    if (!ranges.empty() && ranges.back().group == group && ranges.back().end == lo - begin)
      ranges.back().end = hi - begin;
    else
      ranges.push_back(zf_optimizer_range{lo - begin, hi - begin, group, 0});
  }
  return ranges;
}

using StageHook = zf_status (*)(zf_object *, uint32_t, const zf_step_buffers *, zf_error *);

class Trainer {
 public:
  Trainer(const Config &config, Runtime &runtime, PluginRegistry &registry)
      : config_(config), runtime_(runtime), comm_(*runtime.comm), plugins_(config, runtime, registry),
        timers_(runtime.timers) {
    torch::manual_seed(uint64_t(config.integer("run", "seed")));
    model_ = make_model(config);
    data_ = make_data_source(config);
    eval_data_ = make_data_source(config, Split::eval);
    eval_every_ = config.integer("train", "eval_every");
    ZF_REQUIRE(eval_every_ == 0 || eval_data_ != nullptr,
               "%s: train.eval_every = %lld but the data has no held-out split; set data.eval_fraction",
               config.where("train", "eval_every").str().c_str(), (long long)eval_every_);
    flat_ = std::make_unique<FlatBuffers>(model_->parameters(), model_->block_names(),
                                          config.boolean("model", "column_major"));
    plan_buffers();
    micro_batch_ = config.integer("train", "micro_batch");
    grad_accum_ = config.integer("train", "grad_accum");
    schedule_.kind = config.string("train", "lr_schedule");
    schedule_.warmup_steps = config.integer("train", "warmup_steps");
    schedule_.total_steps = config.integer("train", "steps");
    schedule_.min_lr_ratio = config.real("train", "min_lr_ratio");
    clip_grad_norm_ = config.real("train", "clip_grad_norm");
    output_dir_ = config.string("run", "output_dir");
    if (output_dir_.empty()) output_dir_ = "runs/" + config.string("run", "name");
    std::string checkpoint_dir = config.string("checkpoint", "dir");
    if (checkpoint_dir.empty()) checkpoint_dir = output_dir_ + "/checkpoints";
    checkpoints_ = std::make_unique<CheckpointStore>(checkpoint_dir, config.integer("checkpoint", "keep"), comm_);
    resume();
  }

  RunSummary run() {
    int64_t steps = config_.integer("train", "steps");
    int64_t warmup = config_.integer("run", "timing_warmup");
    int64_t checkpoint_every = config_.integer("checkpoint", "every");
    const std::string &output_dir = output_dir_;
    std::string progress = config_.string("run", "progress");
    // Under mpirun a rank's stdout is a pseudo-terminal whatever the user's is: no bar by default.
    bool show_progress = progress == "on" || (progress == "auto" && isatty(STDOUT_FILENO) && !launched_under_mpi());
    RunReport report(output_dir, comm_.rank() == 0, show_progress, config_.integer("run", "log_every"),
                     start_step_ > 0);
    print_plan();

    RunSummary summary;
    double timed_ms = 0;
    int64_t timed_steps = 0;
    SignalGuard signals;
    int64_t first_step = start_step_ + 1;
    int64_t step = start_step_;
    while (step < steps) {
      ++step;
      timers_.reset();
      auto started = std::chrono::steady_clock::now();
      double loss = train_step(step);
      double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      if (!std::isfinite(loss))
        throw Error(format("step %lld: the loss is %f; lower optimizer.lr or check the data", (long long)step, loss));
      if (step == first_step) summary.initial_loss = loss;
      summary.final_loss = loss;
      if (step >= first_step + warmup || steps - first_step < warmup) {
        timed_ms += step_ms;
        ++timed_steps;
      }
      StepRecord r = record(step, steps, loss, step_ms);
      if (eval_every_ > 0 && (step % eval_every_ == 0 || step == steps)) {
        r.eval_loss = evaluate();
        summary.eval_loss = r.eval_loss;
      }
      report.step(r);
      summary.stop_signal = agreed_stop_signal();
      if (summary.stop_signal || (checkpoint_every > 0 && step % checkpoint_every == 0) ||
          (step == steps && checkpoint_every > 0))
        save_checkpoint(step);
      if (summary.stop_signal) {
        if (comm_.rank() == 0)
          std::printf("zfcore: stopped by signal %d after step %lld; resume with the same command\n",
                      summary.stop_signal, (long long)step);
        break;
      }
    }
    summary.first_step = first_step;
    summary.steps = step;
    summary.mean_step_ms = timed_steps ? timed_ms / double(timed_steps) : 0;
    summary.param_digest = param_digest();
    summary.output_dir = output_dir;
    report.finish(summary_json(summary, timed_steps));
    if (!summary.stop_signal) finish();
    return summary;
  }

  // After the last step: export the model and print a sample, as the config asks.
  void finish() {
    std::string export_dir = config_.string("checkpoint", "export_hf");
    if (!export_dir.empty() || config_.integer("sample", "tokens") > 0) gather_whole_model();
    if (!export_dir.empty() && comm_.rank() == 0) {
      save_hf_checkpoint(*model_, export_dir, hf_export_options(config_, master_, &flat_->layout()));
      std::printf("zfcore: exported the model in Hugging Face format to %s\n", export_dir.c_str());
    }
    int64_t tokens = config_.integer("sample", "tokens");
    if (tokens > 0 && comm_.rank() == 0) {
      SampleOptions options;
      options.prompt = config_.string("sample", "prompt");
      options.tokens = tokens;
      options.temperature = config_.real("sample", "temperature");
      options.top_k = config_.integer("sample", "top_k");
      options.context = config_.integer("data", "seq_len");
      options.seed = uint64_t(config_.integer("run", "seed"));
      auto tokenizer = make_tokenizer(config_);
      std::string text = generate(*model_, *tokenizer, options);
      std::printf("zfcore: sample (%lld tokens, temperature %g):\n%s\n", (long long)tokens, options.temperature,
                  text.c_str());
    }
    std::fflush(stdout);
  }

  // Mean loss per counted token over the held-out split (or its first eval_batches micro-batches),
  // across ranks.
  double evaluate() {
    torch::NoGradGuard no_grad;
    model_->train(false);
    int64_t micro = micro_batch_;
    int64_t chunks = std::min<int64_t>((eval_data_->size() + micro - 1) / micro, config_.integer("train", "eval_batches"));
    double sums[2] = {0, 0};  // loss * tokens, tokens
    // Every rank runs the same number of rounds: with sharded parameters each block's gather is
    // a collective, also on a rank whose share of the chunks has run out.
    int64_t world = comm_.world_size();
    for (int64_t round = 0; round < (chunks + world - 1) / world; ++round) {
      int64_t chunk = round * world + comm_.rank();
      bool mine = chunk < chunks;
      Batch batch = mine ? on_device(eval_data_->batch(chunk, micro)) : Batch{};
      torch::Tensor hidden = batch.inputs;
      for (size_t block = 0; block < flat_->layout().block_count; ++block) {
        enter_block(uint32_t(block), 0);
        if (mine) hidden = model_->forward_block(block, hidden, batch);
        leave_block(uint32_t(block));
      }
      if (!mine) continue;
      double counted = batch.targets.ne(kIgnoreIndex).sum().item<double>();
      sums[0] += model_->loss(hidden, batch).item<double>() * counted;
      sums[1] += counted;
    }
    comm_.all_reduce(zf_tensor_view{sums, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
    model_->train(true);
    return sums[1] > 0 ? sums[0] / sums[1] : 0.0;
  }

 private:
  void plan_buffers() {
    const zf_layout &layout = flat_->layout();
    auto &stage = *plugins_.stage.instance;
    zf_stage_plan plan{};
    plan.struct_size = sizeof plan;
    std::vector<uint8_t> resident(layout.block_count, 1);
    plan.block_resident = resident.data();
    zf_error error{};
    stage.check(stage.api<zf_stage_api>()->plan(stage.object(), &layout, &plan, &error), error, "plan");
    uint64_t numel = std::max(layout.numel, plan.padded_numel);
    ZF_REQUIRE(plan.shard_begin <= plan.shard_end && plan.shard_end <= numel,
               "stage plugin '%s' planned the shard [%llu, %llu) outside the %llu-element buffers", stage.name(),
               (unsigned long long)plan.shard_begin, (unsigned long long)plan.shard_end, (unsigned long long)numel);
    shard_begin_ = plan.shard_begin;
    shard_end_ = plan.shard_end;
    prefetch_numel_ = plan.prefetch_numel;
    dtype_ = compute_dtype(config_);
    flat_->materialize(numel, dtype_, runtime_.memory, tier());

    // Every rank starts from rank 0's parameters.
    comm_.broadcast(view_of(flat_->params), 0, runtime_.compute_stream);

    auto &offload = *plugins_.offload.instance;
    zf_offload_plan tiers{};
    tiers.struct_size = sizeof tiers;
    offload.check(offload.api<zf_offload_api>()->plan(offload.object(), &layout, shard_numel(), &tiers, &error),
                  error, "plan");
    check_master_tier(tiers.master_tier);
    master_ = ledger_tensor(runtime_.memory, tiers.master_tier, shard_numel(), torch::kFloat32, "master");
    master_.copy_(flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel())));
    padded_numel_ = numel;
    if (stage.file().descriptor->capabilities & ZF_CAP_SHARD_PARAMETERS) shard_parameters(std::move(resident));
    if (stage_reduce_block()) grad_shards_ = std::make_unique<ShardedGradients>(*flat_, runtime_.memory, tier(), shard_numel());

    auto &optimizer = *plugins_.optimizer.instance;
    optimizer.check(optimizer.api<zf_optimizer_api>()->init_state(optimizer.object(), shard_numel(), &error), error,
                    "init_state");
    ranges_ = optimizer_ranges(layout, shard_begin_, shard_end_);
    base_lr_ = config_.real("optimizer", "lr");
    const double lr = base_lr_;
    zf_optimizer_group decay{float(lr), float(config_.real("optimizer", "beta1")),
                             float(config_.real("optimizer", "beta2")), float(config_.real("optimizer", "eps")),
                             float(config_.real("optimizer", "weight_decay")), {}};
    zf_optimizer_group no_decay = decay;
    no_decay.weight_decay = 0;
    groups_ = {decay, no_decay};
  }

  uint64_t shard_numel() const { return shard_end_ - shard_begin_; }
  bool on_gpu() const { return runtime_.device == ZF_DEVICE_CUDA; }
  zf_tier tier() const { return on_gpu() ? ZF_TIER_DEVICE : ZF_TIER_HOST; }  // of the model's buffers
  void *stream() const { return runtime_.compute_stream; }

  // Stage entries that move data (after_backward, reduce_block, gather_block) queue it on the
  // communication stream (GPU runs), after the compute queued so far; the compute stream waits for
  // it where it needs the results (join_comm). On CPU both streams are NULL and this changes nothing.
  zf_step_buffers on_comm(zf_step_buffers b) const {
    if (!runtime_.comm_stream) return b;
    stream_wait(runtime_.comm_stream, stream());
    b.stream = runtime_.comm_stream;
    return b;
  }
  void join_comm() const { stream_wait(stream(), runtime_.comm_stream); }

  // The optimizer updates the master weights where they live: a GPU run keeps them on the GPU
  // (offloading them to the host comes with the offload tiers), a CPU run on the host.
  void check_master_tier(int tier) {
    auto &offload = *plugins_.offload.instance;
    auto &optimizer = *plugins_.optimizer.instance;
    if (!on_gpu()) {
      ZF_REQUIRE(tier == ZF_TIER_HOST || tier == ZF_TIER_PINNED_HOST,
                 "offload plugin '%s' put the master weights on tier %s, which this CPU run does not have",
                 offload.name(), tier_name(tier));
      return;
    }
    ZF_REQUIRE(tier == ZF_TIER_DEVICE,
               "offload plugin '%s' put the master weights on tier %s; this GPU run keeps them on the device "
               "(offload.plugin = \"none\")", offload.name(), tier_name(tier));
    ZF_REQUIRE(optimizer.file().descriptor->capabilities & ZF_CAP_CUDA,
               "optimizer plugin '%s' runs on the CPU but run.device = \"cuda\" keeps the master weights on the "
               "GPU: use optimizer.plugin = \"gpu_adam\"", optimizer.name());
  }

  // Batches come from the data source on the host; a GPU run moves them to its device.
  Batch on_device(Batch batch) const {
    if (!on_gpu()) return batch;
    torch::Device device(torch::kCUDA, c10::DeviceIndex(runtime_.device_index));
    batch.inputs = batch.inputs.to(device);
    batch.targets = batch.targets.to(device);
    return batch;
  }

  // ---- Sharded parameters (a stage with ZF_CAP_SHARD_PARAMETERS, ZeRO-3) ----
  // From here on this rank holds its shard of the parameters plus the resident blocks; the
  // other blocks are gathered around their forward and backward.
  void shard_parameters(std::vector<uint8_t> resident) {
    sharded_ = std::make_unique<ShardedParameters>(*flat_, runtime_.memory, tier(), shard_begin_, shard_end_,
                                                   std::move(resident));
    gathered_.assign(sharded_->block_count(), nullptr);
    gather_resident_blocks(0);
  }

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
    enter_block(block, step);
    prefetch_after(block, -1, step);
    call_hook(plugins_.stage.instance->api<zf_stage_api>()->before_backward, "before_backward", block, b);
  }

  // A block's backward is done: the stage reduces its gradients into the owners' shards, then
  // its gradient memory and (sharded) parameters go.
  // On a GPU the reduction runs on the communication stream beside the next blocks' backward.
  void finish_block_backward(uint32_t block, const zf_step_buffers &b) {
    zf_step_buffers comm = on_comm(b);
    call_hook(plugins_.stage.instance->api<zf_stage_api>()->after_backward, "after_backward", block, comm);
    if (grad_shards_) {
      uint32_t timer = timers_.id("grad_reduce");  // reducing a block into the shards (GPU: comm stream)
      timers_.start(timer, comm.stream);
      comm.block_grads = grad_shards_->block_view(block);
      call_hook(stage_reduce_block(), "reduce_block", block, comm);
      timers_.stop(timer, comm.stream);
      grad_shards_->release(block, record_event(runtime_.comm_stream), stream());
    }
    leave_block(block);
  }

  // This rank's shard of the working parameters, wherever they live.
  torch::Tensor params_shard() const {
    if (sharded_) return sharded_->shard;
    return flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel()));
  }

  // Gathers on the communication stream. The compute stream waits for the block's parameters
  // now, or, gathered ahead (prefetch), when the block is entered.
  void gather_block(uint32_t block, int64_t step, bool ahead = false) {
    auto &stage = *plugins_.stage.instance;
    const auto *api = stage.api<zf_stage_api>();
    sharded_->hold(block);
    zf_step_buffers b = on_comm(buffers(step, uint32_t(grad_accum_ - 1)));
    uint32_t timer = timers_.id("param_gather");  // gathering a block's parameters (GPU: comm stream)
    timers_.start(timer, b.stream);
    b.block_params = sharded_->block_view(block);
    zf_error error{};
    stage.check(api->gather_block(stage.object(), block, &b, &error), error, "gather_block");
    timers_.stop(timer, b.stream);
    void *gathered = record_event(runtime_.comm_stream);
    if (ahead) gathered_[block] = gathered;
    else wait_event(stream(), gathered);
  }

  // The compute stream waits for a block gathered ahead (no-op otherwise).
  void wait_gathered(uint32_t block) {
    wait_event(stream(), gathered_[block]);
    gathered_[block] = nullptr;
  }

  // A block and the blocks whose tied weights it reads: what must be held while it computes.
  std::vector<uint32_t> needed_by(uint32_t block) const {
    std::vector<uint32_t> needed = {block};
    for (size_t tied : model_->tied_blocks(block)) needed.push_back(uint32_t(tied));
    return needed;
  }

  // GPU runs: gathers the blocks that follow `block` in the direction of travel (+1 forward, -1
  // backward), up to the stage's prefetch_numel elements and at least the next one, on the
  // communication stream while `block` computes.
  void prefetch_after(uint32_t block, int direction, int64_t step) {
    if (!sharded_ || !runtime_.comm_stream || prefetch_numel_ == 0) return;
    uint64_t ahead = 0;
    for (int64_t next = int64_t(block) + direction; next >= 0 && next < int64_t(sharded_->block_count());
         next += direction) {
      for (uint32_t b : needed_by(uint32_t(next))) {
        if (sharded_->resident(b)) continue;
        if (!sharded_->held(b)) gather_block(b, step, /*ahead=*/true);
        ahead += flat_->layout().blocks[b].numel;
      }
      if (ahead >= prefetch_numel_) break;
    }
  }

  // Resident blocks hold gathered copies: refresh them after the shard changed.
  void gather_resident_blocks(int64_t step) {
    for (uint32_t block = 0; block < sharded_->block_count(); ++block)
      if (sharded_->resident(block)) gather_block(block, step);
  }

  // Before a block computes (forward, backward or evaluation): gather it, and the blocks whose
  // tied weights it reads, if they are released; wait for them if they were gathered ahead.
  void enter_block(uint32_t block, int64_t step) {
    if (!sharded_) return;
    for (uint32_t b : needed_by(block)) {
      if (sharded_->resident(b)) continue;
      if (sharded_->held(b)) wait_gathered(b);
      else gather_block(b, step);
    }
  }
  void leave_block(uint32_t block) {
    if (!sharded_) return;
    for (uint32_t b : needed_by(block)) {
      wait_gathered(b);  // the compute stream frees the memory: no gather may still write it
      sharded_->release(b);
    }
  }

  // Every rank gathers every block, so that rank 0 can export or sample the whole model.
  void gather_whole_model() {
    if (!sharded_) return;
    for (uint32_t block = 0; block < sharded_->block_count(); ++block) enter_block(block, 0);
  }

  // A hash of the segment table: a checkpoint only fits the layout that wrote it.
  std::string layout_digest() const {
    const zf_layout &layout = flat_->layout();
    uint64_t state = kDigestSeed;
    for (uint32_t i = 0; i < layout.segment_count; ++i) {
      const zf_segment &seg = layout.segments[i];
      state = digest_bytes(seg.name, std::strlen(seg.name), state);
      uint64_t fields[5] = {seg.offset, seg.rows, seg.cols, seg.block, seg.flags};
      state = digest_bytes(fields, sizeof fields, state);
    }
    return format("%016llx", (unsigned long long)state);
  }

  TrainingState training_state(int64_t step) {
    TrainingState state;
    state.step = step;
    state.shard_begin = shard_begin_;
    state.shard_end = shard_end_;
    state.layout_digest = layout_digest();
    state.master = master_;
    auto &optimizer = *plugins_.optimizer.instance;
    auto state_tensor = optimizer.api<zf_optimizer_api>()->state_tensor;
    ZF_REQUIRE(state_tensor != nullptr, "optimizer plugin '%s' exposes no state (state_tensor), so it cannot be "
               "checkpointed", optimizer.name());
    for (uint32_t index = 0;; ++index) {
      const char *name = nullptr;
      zf_tensor_view view{};
      zf_error error{};
      zf_status status = state_tensor(optimizer.object(), index, &name, &view, &error);
      if (status == ZF_DECLINED) break;
      optimizer.check(status, error, "state_tensor");
      state.optimizer.emplace_back(name, tensor_of(view));
    }
    state.rng = at::detail::getDefaultCPUGenerator().get_state();
    if (on_gpu()) state.device_rng = device_generator().get_state();
    return state;
  }

  at::Generator device_generator() const {
    return at::globalContext().defaultGenerator(c10::Device(c10::kCUDA, c10::DeviceIndex(runtime_.device_index)));
  }

  void save_checkpoint(int64_t step) {
    TrainingState state = training_state(step);
    auto path = checkpoints_->save(state, checkpoint_info(step));
    if (comm_.rank() == 0) std::printf("zfcore: checkpoint %s\n", path.c_str());
  }

  // [checkpoint] resume: "auto" continues from the newest checkpoint in the directory, "never"
  // starts fresh, anything else names a checkpoint directory.
  void resume() {
    std::string resume = config_.string("checkpoint", "resume");
    std::optional<std::filesystem::path> from;
    if (resume == "auto") from = checkpoints_->latest();
    else if (resume != "never") {
      ZF_REQUIRE(std::filesystem::exists(resume), "%s: checkpoint.resume = \"%s\": no such checkpoint directory",
                 config_.where("checkpoint", "resume").str().c_str(), resume.c_str());
      from = std::filesystem::path(resume);
    }
    if (!from) return;
    TrainingState state = training_state(0);
    checkpoints_->load(*from, state);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(state.rng);
    if (on_gpu() && state.device_rng.defined()) device_generator().set_state(state.device_rng);
    {
      torch::NoGradGuard no_grad;
      params_shard().copy_(master_);
    }
    gather_parameters(state.step);
    start_step_ = state.step;
    if (comm_.rank() == 0) std::printf("zfcore: resumed from %s (step %lld)\n", from->c_str(), (long long)start_step_);
  }

  // Ranks stop together: the largest signal number any rank received, or 0.
  int agreed_stop_signal() {
    int64_t signal[1] = {g_stop_signal.load()};
    comm_.all_reduce(zf_tensor_view{signal, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
    return int(signal[0]);
  }

  std::string checkpoint_info(int64_t step) {
    JsonWriter json;
    json.begin_object().key("step").value(step).key("world_size").value(comm_.world_size());
    json.key("config").value(config_.file()).key("layout").value(layout_digest());
    json.key("optimizer").value(plugins_.optimizer.instance->name());
    json.key("stage").value(plugins_.stage.instance->name()).end_object();
    return json.str();
  }

  zf_step_buffers buffers(int64_t step, uint32_t micro) const {
    zf_step_buffers b{};
    b.struct_size = sizeof b;
    b.micro_step = micro;
    b.micro_steps = uint32_t(grad_accum_);
    b.step = step;
    b.layout = &flat_->layout();
    // Whole-buffer views have data == NULL where no rank holds the whole buffer.
    zf_tensor_view absent{nullptr, padded_numel_, abi_dtype(dtype_), ZF_DEVICE_CPU, 0, 0};
    b.params = sharded_ ? absent : view_of(flat_->params);
    b.param_shard = view_of(params_shard());
    b.grads = grad_shards_ ? absent : view_of(flat_->grads);
    b.grad_shard = view_of(grads_shard());
    b.stream = runtime_.compute_stream;
    return b;
  }

  void call_hook(StageHook hook, const char *name, uint32_t block, const zf_step_buffers &b) {
    if (!hook) return;
    zf_error error{};
    auto &stage = *plugins_.stage.instance;
    stage.check(hook(stage.object(), block, &b, &error), error, name);
  }

  double train_step(int64_t step) {
    StandardTimers t(timers_);
    const auto *stage_api = plugins_.stage.instance->api<zf_stage_api>();
    double loss_sum = 0;
    for (int64_t micro = 0; micro < grad_accum_; ++micro) {
      zf_step_buffers b = buffers(step, uint32_t(micro));
      int64_t chunk = ((step - 1) * grad_accum_ + micro) * comm_.world_size() + comm_.rank();
      Batch batch = on_device(data_->batch(chunk, micro_batch_));
      samples_ += batch.samples;
      tokens_ += batch.tokens;
      tokens_total_ += batch.tokens;

      timers_.start(t.fwd, stream());
      std::vector<torch::Tensor> outputs;
      torch::Tensor hidden = batch.inputs;
      size_t blocks = flat_->layout().block_count;
      for (size_t block = 0; block < blocks; ++block) {
        enter_block(uint32_t(block), step);
        prefetch_after(uint32_t(block), +1, step);
        call_hook(stage_api->before_forward, "before_forward", uint32_t(block), b);
        hidden = model_->forward_block(block, hidden, batch);
        call_hook(stage_api->after_forward, "after_forward", uint32_t(block), b);
        leave_block(uint32_t(block));
        outputs.push_back(hidden);
      }
      torch::Tensor loss = model_->loss(hidden, batch);
      timers_.stop(t.fwd, stream());

      timers_.start(t.bwd, stream());
      timers_.start(t.bwd_inner, stream());
      if (sharded_ || grad_shards_ || stage_api->before_backward || stage_api->after_backward) {
        // The gradient of block b's output arriving means block b+1's backward is done and
        // block b's is about to start.
        for (size_t block = 0; block < blocks; ++block) {
          outputs[block].register_hook([this, block, blocks, b, step](const torch::Tensor &) {
            if (block + 1 < blocks) finish_block_backward(uint32_t(block + 1), b);
            start_block_backward(uint32_t(block), step, b);
          });
        }
      }
      loss.backward();
      finish_block_backward(0, b);
      if (grad_shards_) grad_shards_->release_all(stream());
      join_comm();
      timers_.stop(t.bwd_inner, stream());
      loss_sum += loss.item<double>();
      if (micro + 1 == grad_accum_) {
        timers_.start(t.bwd_allreduce, stream());
        zf_error error{};
        auto &stage = *plugins_.stage.instance;
        stage.check(stage_api->reduce_gradients(stage.object(), &b, &error), error, "reduce_gradients");
        timers_.stop(t.bwd_allreduce, stream());
      }
      timers_.stop(t.bwd, stream());
    }

    if (step == 1) select_columns();
    timers_.start(t.step, stream());
    optimizer_step(step);
    timers_.stop(t.step, stream());
    if (grad_shards_) grad_shards_->shard.zero_();
    else flat_->grads.zero_();

    // The reported loss is the mean over micro-batches and ranks.
    double reduced[1] = {loss_sum};
    zf_tensor_view view{reduced, 1, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0};
    comm_.all_reduce(view, ZF_REDUCE_SUM, nullptr);
    return reduced[0] / double(grad_accum_ * comm_.world_size());
  }

  void optimizer_step(int64_t step) {
    auto &optimizer = *plugins_.optimizer.instance;
    torch::Tensor grads = grads_shard();
    torch::Tensor params = params_shard();
    const double mean_scale = 1.0 / double(grad_accum_ * comm_.world_size());
    double clip = 1.0;
    if (clip_grad_norm_ > 0) {
      grad_norm_ = global_grad_norm(grads) * mean_scale;
      clip = std::min(1.0, clip_grad_norm_ / (grad_norm_ + 1e-6));
    }
    double lr_factor = schedule_.factor(step);
    for (zf_optimizer_group &group : groups_) group.lr = float(base_lr_ * lr_factor);
    lr_ = base_lr_ * lr_factor;
    zf_optimizer_step_args args = optimizer_step_args(ranges_.data(), ranges_.size(), groups_.data(), groups_.size(),
                                                      step, float(mean_scale * clip), view_of(master_), view_of(grads));
    args.stream = runtime_.compute_stream;
    // An optimizer that writes the low-precision working parameters in its own pass saves the copy.
    bool writes_params = (optimizer.file().descriptor->capabilities & ZF_CAP_LOW_PRECISION_OUT) &&
                         params.scalar_type() != torch::kFloat32 && params.device() == master_.device();
    if (writes_params) args.params_out = view_of(params);
    zf_error error{};
    optimizer.check(optimizer.api<zf_optimizer_api>()->step(optimizer.object(), &args, &error), error, "step");
    if (!writes_params) {
      torch::NoGradGuard no_grad;
      params.copy_(master_);
    }
    gather_parameters(step);
  }

  void gather_parameters(int64_t step) {
    auto &stage = *plugins_.stage.instance;
    if (auto gather = stage.api<zf_stage_api>()->gather_parameters) {
      zf_error error{};
      zf_step_buffers b = buffers(step, uint32_t(grad_accum_ - 1));
      stage.check(gather(stage.object(), &b, &error), error, "gather_parameters");
    }
    if (sharded_) gather_resident_blocks(step);
  }

  // L2 norm of the summed gradients over all ranks. Each element is counted once even when
  // several ranks own it (zero0: all of them), by dividing by how many ranks own each element.
  double global_grad_norm(const torch::Tensor &shard_grads) {
    double sums[2] = {shard_grads.to(torch::kFloat64).pow(2).sum().item<double>(), double(shard_numel())};
    comm_.all_reduce(zf_tensor_view{sums, 2, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_SUM, nullptr);
    double owners = sums[1] / double(padded_numel_);
    return std::sqrt(sums[0] / std::max(1.0, owners));
  }

  // Runs the selector once, on the reduced gradients of the first step (the selection step);
  // ZenFlow runs it on its own schedule.
  void select_columns() {
    const zf_layout &layout = flat_->layout();
    uint32_t columns = 0;
    for (uint32_t i = 0; i < layout.segment_count; ++i)
      if (layout.segments[i].flags & ZF_SEGMENT_MATRIX) columns += uint32_t(layout.segments[i].cols);
    if (columns == 0) return;
    auto &selector = *plugins_.selector.instance;
    const auto *api = selector.api<zf_selector_api>();
    std::vector<float> scores(columns, 0.0f);
    std::vector<uint8_t> mask(columns, 0);
    zf_select_args args{};
    args.struct_size = sizeof args;
    args.column_count = columns;
    args.layout = &layout;
    args.grads = view_of(grads_shard());
    args.grad_offset = shard_begin_;
    zf_tensor_view score_view{scores.data(), columns, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0};
    zf_tensor_view mask_view{mask.data(), columns, ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0};
    zf_error error{};
    if (api->score) selector.check(api->score(selector.object(), &args, score_view, &error), error, "score");
    comm_.all_reduce(score_view, ZF_REDUCE_SUM, nullptr);
    selector.check(api->select(selector.object(), &args, score_view, mask_view, &error), error, "select");
    selected_fraction_ = double(std::count(mask.begin(), mask.end(), uint8_t(1))) / double(columns);
  }

  StepRecord record(int64_t step, int64_t steps, double loss, double step_ms) {
    StepRecord r;
    r.step = step;
    r.steps = steps;
    r.loss = loss;
    r.step_ms = step_ms;
    double seconds = step_ms / 1000.0;
    double world = double(comm_.world_size());
    r.samples_per_s = seconds > 0 ? double(samples_) * world / seconds : 0;
    r.tokens_per_s = seconds > 0 ? double(tokens_) * world / seconds : 0;
    samples_ = tokens_ = 0;
    for (const auto &[name, ms] : timers_.snapshot()) {
      r.timers_ms.emplace_back(name, ms);
      bool per_micro = name == "fwd" || name == "bwd" || name == "bwd_inner";
      if (name == "fwd" || name == "bwd" || name == "bwd_inner" || name == "bwd_allreduce" || name == "step")
        r.timers_ms.emplace_back(name + "_microstep", per_micro ? ms / double(grad_accum_) : ms);
    }
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) r.memory[tier] = runtime_.memory.current(tier);
    if (on_gpu()) {  // the caching allocator's view: tensors of the step plus the ledger's blocks
      DeviceMemory gpu = device_memory();
      r.device_allocated_peak = gpu.allocated_peak;
      r.device_reserved_peak = gpu.reserved_peak;
      device_peak_.allocated_peak = std::max(device_peak_.allocated_peak, gpu.allocated_peak);
      device_peak_.reserved_peak = std::max(device_peak_.reserved_peak, gpu.reserved_peak);
      reset_device_memory_peak();
    }
    for (const auto &[name, ms] : r.timers_ms) timer_totals_[name] += ms;
    r.lr = lr_;
    r.grad_norm = clip_grad_norm_ > 0 ? grad_norm_ : -1.0;
    return r;
  }

  // Hash of the fp32 master parameters in segment order (padding excluded), over all shards.
  std::string param_digest() {
    int world = comm_.world_size();
    int64_t range[2] = {int64_t(shard_begin_), int64_t(shard_end_)};
    std::vector<int64_t> ranges(size_t(2 * world));
    comm_.all_gather(zf_tensor_view{range, 2, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0},
                     zf_tensor_view{ranges.data(), ranges.size(), ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, nullptr);
    int64_t longest = 0;
    for (int r = 0; r < world; ++r) longest = std::max(longest, ranges[2 * r + 1] - ranges[2 * r]);
    std::vector<float> mine(size_t(longest), 0.0f), all(size_t(longest) * size_t(world));
    torch::Tensor master = master_.cpu();
    std::memcpy(mine.data(), master.data_ptr<float>(), shard_numel() * sizeof(float));
    comm_.all_gather(zf_tensor_view{mine.data(), mine.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                     zf_tensor_view{all.data(), all.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0}, nullptr);
    std::vector<float> full(padded_numel_, 0.0f);
    for (int r = 0; r < world; ++r)  // ranks may own the same range (zero0): last copy wins, all equal
      std::memcpy(full.data() + ranges[2 * r], all.data() + size_t(r) * size_t(longest),
                  size_t(ranges[2 * r + 1] - ranges[2 * r]) * sizeof(float));
    const zf_layout &layout = flat_->layout();
    uint64_t state = kDigestSeed;
    for (uint32_t i = 0; i < layout.segment_count; ++i)
      state = digest_bytes(full.data() + layout.segments[i].offset, layout.segments[i].numel * sizeof(float), state);
    return format("%016llx", (unsigned long long)state);
  }

  void print_plan() {
    if (comm_.rank() != 0) return;
    const zf_layout &layout = flat_->layout();
    uint64_t params = 0;
    for (uint32_t i = 0; i < layout.segment_count; ++i) params += layout.segments[i].numel;
    std::printf("zfcore: model %s, %llu parameters in %u blocks, %s, world size %d (%s)\n", model_->name().c_str(),
                (unsigned long long)params, layout.block_count, c10::toString(dtype_), comm_.world_size(),
                comm_.name().c_str());
    std::printf("zfcore: plugins: stage %s, offload %s, optimizer %s, selector %s\n",
                plugins_.stage.instance->name(), plugins_.offload.instance->name(),
                plugins_.optimizer.instance->name(), plugins_.selector.instance->name());
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) {
      auto tags = runtime_.memory.current_by_tag(tier);
      if (tags.empty()) continue;
      std::string detail;
      for (const auto &[tag, bytes] : tags) detail += format("%s%s %s", detail.empty() ? "" : ", ", tag.c_str(),
                                                            format_bytes(bytes).c_str());
      std::printf("zfcore: memory %s: %s (%s)\n", tier_name(tier),
                  format_bytes(runtime_.memory.current(tier)).c_str(), detail.c_str());
    }
    std::fflush(stdout);
  }

  std::string summary_json(const RunSummary &s, int64_t timed_steps) {
    int64_t samples_per_step = micro_batch_ * grad_accum_ * comm_.world_size();
    double seconds = s.mean_step_ms / 1000.0;
    JsonWriter json;
    json.begin_object();
    json.key("config").value(config_.file());
    json.key("model").value(model_->name());
    json.key("steps").value(s.steps);
    json.key("first_step").value(s.first_step);
    json.key("stop_signal").value(s.stop_signal);
    json.key("world_size").value(comm_.world_size());
    json.key("communicator").value(comm_.name());
    json.key("samples_per_step").value(samples_per_step);
    json.key("initial_loss").value(s.initial_loss);
    json.key("final_loss").value(s.final_loss);
    if (eval_every_ > 0) json.key("eval_loss").value(s.eval_loss);
    json.key("timed_steps").value(timed_steps);
    json.key("mean_step_ms").value(s.mean_step_ms);
    json.key("samples_per_s").value(seconds > 0 ? double(samples_per_step) / seconds : 0.0);
    json.key("tokens_per_s").value(seconds > 0 && s.steps > 0 ? double(tokens_total_) / double(s.steps - s.first_step + 1) *
                                                                    double(comm_.world_size()) / seconds
                                                              : 0.0);
    json.key("selected_column_fraction").value(selected_fraction_);
    json.key("mean_timers_ms").begin_object();
    for (const auto &[name, total] : timer_totals_) json.key(name).value(total / double(s.steps));
    json.end_object();
    json.key("peak_memory_bytes").begin_object();
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) json.key(tier_name(tier)).value(runtime_.memory.peak(tier));
    json.end_object();
    if (on_gpu()) {
      json.key("gpu_memory_bytes").begin_object();
      json.key("allocated_peak").value(device_peak_.allocated_peak).key("reserved_peak").value(device_peak_.reserved_peak);
      json.key("ledger_device_peak").value(runtime_.memory.peak(ZF_TIER_DEVICE)).end_object();
    }
    json.key("memory_bytes").begin_object();  // this rank's ledger at the end, "tier.tag": bytes
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier)
      for (const auto &[tag, bytes] : runtime_.memory.current_by_tag(tier))
        json.key(std::string(tier_name(tier)) + "." + tag).value(bytes);
    json.end_object();
    json.key("plugins").begin_object();
    for (const ActivePlugin *p : {&plugins_.stage, &plugins_.offload, &plugins_.optimizer, &plugins_.selector}) {
      const zf_descriptor &d = *p->file().descriptor;
      json.key(kind_name(d.kind)).begin_object();
      json.key("name").value(d.name).key("version").value(d.version ? d.version : "");
      json.key("path").value(p->file().path.string());
      json.end_object();
    }
    json.end_object();
    json.key("param_digest").value(s.param_digest);
    json.end_object();
    return json.str();
  }

  const Config &config_;
  Runtime &runtime_;
  Communicator &comm_;
  PluginSet plugins_;
  Timers &timers_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<DataSource> data_, eval_data_;
  int64_t eval_every_ = 0;
  std::unique_ptr<FlatBuffers> flat_;
  std::unique_ptr<ShardedParameters> sharded_;  // only under a stage that shards parameters
  std::vector<void *> gathered_;  // per block: event after its gather ahead, until entered
  uint64_t prefetch_numel_ = 0;   // elements the stage lets the host gather ahead (GPU runs)
  std::unique_ptr<ShardedGradients> grad_shards_;  // only under a stage that reduces per block
  uint64_t padded_numel_ = 0;  // elements of the flat buffers (>= layout numel)
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Tensor master_;
  uint64_t shard_begin_ = 0, shard_end_ = 0;
  std::vector<zf_optimizer_range> ranges_;
  std::vector<zf_optimizer_group> groups_;
  int64_t micro_batch_ = 1, grad_accum_ = 1;
  int64_t samples_ = 0, tokens_ = 0, tokens_total_ = 0;  // tokens_total_: this rank, whole run
  DeviceMemory device_peak_;
  double selected_fraction_ = 0;
  std::map<std::string, double> timer_totals_;
  LrSchedule schedule_;
  double base_lr_ = 0, lr_ = 0, clip_grad_norm_ = 0, grad_norm_ = 0;
  std::string output_dir_;
  std::unique_ptr<CheckpointStore> checkpoints_;
  int64_t start_step_ = 0;
};

}  // namespace

RunSummary train(const Config &config, Runtime &runtime, PluginRegistry &registry) {
  if (config.string("run", "device") == "cuda" && runtime.device != ZF_DEVICE_CUDA) use_cuda_device(runtime);
  if (config.boolean("run", "deterministic")) use_deterministic_kernels();
  int64_t threads = config.integer("run", "threads");
  if (threads == 0)
    threads = std::max<int64_t>(1, int64_t(runtime.worker_cores.size()) / std::max(1, runtime.comm->local_size()));
  torch::set_num_threads(int(threads));
  Trainer trainer(config, runtime, registry);
  return trainer.run();
}

}  // namespace zf
