#include "engine/engine.hpp"

#include "data/data_source.hpp"
#include "engine/flat_buffers.hpp"
#include "engine/plugin_set.hpp"
#include "engine/report.hpp"
#include "model/zoo.hpp"
#include "runtime/error.hpp"
#include "runtime/json.hpp"
#include "runtime/log.hpp"

#include <unistd.h>

#include <algorithm>
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

class Trainer {
 public:
  Trainer(const Config &config, Runtime &runtime, PluginRegistry &registry)
      : config_(config), runtime_(runtime), comm_(*runtime.comm), plugins_(config, runtime, registry),
        timers_(runtime.timers) {
    torch::manual_seed(uint64_t(config.integer("run", "seed")));
    model_ = make_model(config);
    data_ = make_data_source(config);
    flat_ = std::make_unique<FlatBuffers>(model_->parameters(), model_->block_names(),
                                          config.boolean("model", "column_major"));
    plan_buffers();
    micro_batch_ = config.integer("train", "micro_batch");
    grad_accum_ = config.integer("train", "grad_accum");
  }

  RunSummary run() {
    int64_t steps = config_.integer("train", "steps");
    int64_t warmup = config_.integer("run", "timing_warmup");
    std::string name = config_.string("run", "name");
    std::string output_dir = config_.string("run", "output_dir");
    if (output_dir.empty()) output_dir = "runs/" + name;
    std::string progress = config_.string("run", "progress");
    // Under mpirun a rank's stdout is a pseudo-terminal whatever the user's is: no bar by default.
    bool show_progress = progress == "on" || (progress == "auto" && isatty(STDOUT_FILENO) && !launched_under_mpi());
    RunReport report(output_dir, comm_.rank() == 0, show_progress, config_.integer("run", "log_every"));
    print_plan();

    RunSummary summary;
    double timed_ms = 0;
    int64_t timed_steps = 0;
    for (int64_t step = 1; step <= steps; ++step) {
      timers_.reset();
      auto started = std::chrono::steady_clock::now();
      double loss = train_step(step);
      double step_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started).count();
      if (!std::isfinite(loss))
        throw Error(format("step %lld: the loss is %f; lower optimizer.lr or check the data", (long long)step, loss));
      if (step == 1) summary.initial_loss = loss;
      summary.final_loss = loss;
      if (step > warmup || steps <= warmup) {
        timed_ms += step_ms;
        ++timed_steps;
      }
      report.step(record(step, steps, loss, step_ms));
    }
    summary.steps = steps;
    summary.mean_step_ms = timed_steps ? timed_ms / double(timed_steps) : 0;
    summary.param_digest = param_digest();
    summary.output_dir = output_dir;
    report.finish(summary_json(summary, timed_steps));
    return summary;
  }

 private:
  void plan_buffers() {
    const zf_layout &layout = flat_->layout();
    auto &stage = *plugins_.stage.instance;
    zf_stage_plan plan{};
    plan.struct_size = sizeof plan;
    zf_error error{};
    stage.check(stage.api<zf_stage_api>()->plan(stage.object(), &layout, &plan, &error), error, "plan");
    uint64_t numel = std::max(layout.numel, plan.padded_numel);
    ZF_REQUIRE(plan.shard_begin <= plan.shard_end && plan.shard_end <= numel,
               "stage plugin '%s' planned the shard [%llu, %llu) outside the %llu-element buffers", stage.name(),
               (unsigned long long)plan.shard_begin, (unsigned long long)plan.shard_end, (unsigned long long)numel);
    shard_begin_ = plan.shard_begin;
    shard_end_ = plan.shard_end;
    dtype_ = compute_dtype(config_);
    flat_->materialize(numel, dtype_, runtime_.memory);

    // Every rank starts from rank 0's parameters.
    comm_.broadcast(view_of(flat_->params), 0, runtime_.compute_stream);

    auto &offload = *plugins_.offload.instance;
    zf_offload_plan tiers{};
    tiers.struct_size = sizeof tiers;
    offload.check(offload.api<zf_offload_api>()->plan(offload.object(), &layout, shard_numel(), &tiers, &error),
                  error, "plan");
    ZF_REQUIRE(tiers.master_tier == ZF_TIER_HOST || tiers.master_tier == ZF_TIER_PINNED_HOST,
               "offload plugin '%s' put the master weights on tier %s, which this CPU run does not have",
               offload.name(), tier_name(tiers.master_tier));
    master_ = ledger_tensor(runtime_.memory, tiers.master_tier, shard_numel(), torch::kFloat32, "master");
    master_.copy_(flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel())));

    auto &optimizer = *plugins_.optimizer.instance;
    optimizer.check(optimizer.api<zf_optimizer_api>()->init_state(optimizer.object(), shard_numel(), &error), error,
                    "init_state");
    ranges_ = optimizer_ranges(layout, shard_begin_, shard_end_);
    const double lr = config_.real("optimizer", "lr");
    zf_optimizer_group decay{float(lr), float(config_.real("optimizer", "beta1")),
                             float(config_.real("optimizer", "beta2")), float(config_.real("optimizer", "eps")),
                             float(config_.real("optimizer", "weight_decay")), {}};
    zf_optimizer_group no_decay = decay;
    no_decay.weight_decay = 0;
    groups_ = {decay, no_decay};
  }

  uint64_t shard_numel() const { return shard_end_ - shard_begin_; }

  zf_step_buffers buffers(int64_t step, uint32_t micro) const {
    zf_step_buffers b{};
    b.struct_size = sizeof b;
    b.micro_step = micro;
    b.micro_steps = uint32_t(grad_accum_);
    b.step = step;
    b.layout = &flat_->layout();
    b.params = view_of(flat_->params);
    b.grads = view_of(flat_->grads);
    b.stream = runtime_.compute_stream;
    return b;
  }

  using StageHook = zf_status (*)(zf_object *, uint32_t, const zf_step_buffers *, zf_error *);
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
      Batch batch = data_->batch(chunk, micro_batch_);
      samples_ += batch.samples;
      tokens_ += batch.tokens;

      timers_.start(t.fwd);
      std::vector<torch::Tensor> outputs;
      torch::Tensor hidden = batch.inputs;
      size_t blocks = flat_->layout().block_count;
      for (size_t block = 0; block < blocks; ++block) {
        call_hook(stage_api->before_forward, "before_forward", uint32_t(block), b);
        hidden = model_->forward_block(block, hidden, batch);
        call_hook(stage_api->after_forward, "after_forward", uint32_t(block), b);
        outputs.push_back(hidden);
      }
      torch::Tensor loss = model_->loss(hidden, batch);
      timers_.stop(t.fwd);

      timers_.start(t.bwd);
      timers_.start(t.bwd_inner);
      if (stage_api->before_backward || stage_api->after_backward) {
        // The gradient of block b's output arriving means block b+1's backward is done and
        // block b's is about to start.
        for (size_t block = 0; block < blocks; ++block) {
          outputs[block].register_hook([this, block, blocks, b, stage_api](const torch::Tensor &) {
            if (block + 1 < blocks) call_hook(stage_api->after_backward, "after_backward", uint32_t(block + 1), b);
            call_hook(stage_api->before_backward, "before_backward", uint32_t(block), b);
          });
        }
      }
      loss.backward();
      call_hook(stage_api->after_backward, "after_backward", 0, b);
      timers_.stop(t.bwd_inner);
      loss_sum += loss.item<double>();
      if (micro + 1 == grad_accum_) {
        timers_.start(t.bwd_allreduce);
        zf_error error{};
        auto &stage = *plugins_.stage.instance;
        stage.check(stage_api->reduce_gradients(stage.object(), &b, &error), error, "reduce_gradients");
        timers_.stop(t.bwd_allreduce);
      }
      timers_.stop(t.bwd);
    }

    if (step == 1) select_columns();
    timers_.start(t.step);
    optimizer_step(step);
    timers_.stop(t.step);
    flat_->grads.zero_();

    // The reported loss is the mean over micro-batches and ranks.
    double reduced[1] = {loss_sum};
    zf_tensor_view view{reduced, 1, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0};
    comm_.all_reduce(view, ZF_REDUCE_SUM, nullptr);
    return reduced[0] / double(grad_accum_ * comm_.world_size());
  }

  void optimizer_step(int64_t step) {
    auto &optimizer = *plugins_.optimizer.instance;
    torch::Tensor grads = flat_->grads.narrow(0, int64_t(shard_begin_), int64_t(shard_numel()));
    torch::Tensor params = flat_->params.narrow(0, int64_t(shard_begin_), int64_t(shard_numel()));
    zf_optimizer_step_args args{};
    args.struct_size = sizeof args;
    args.range_count = uint32_t(ranges_.size());
    args.ranges = ranges_.data();
    args.groups = groups_.data();
    args.group_count = uint32_t(groups_.size());
    args.grad_scale = float(1.0 / double(grad_accum_ * comm_.world_size()));
    args.step = step;
    args.params = view_of(master_);
    args.grads = view_of(grads);
    args.stream = runtime_.compute_stream;
    zf_error error{};
    optimizer.check(optimizer.api<zf_optimizer_api>()->step(optimizer.object(), &args, &error), error, "step");
    {
      torch::NoGradGuard no_grad;
      params.copy_(master_);
    }
    auto &stage = *plugins_.stage.instance;
    if (auto gather = stage.api<zf_stage_api>()->gather_parameters) {
      zf_step_buffers b = buffers(step, uint32_t(grad_accum_ - 1));
      stage.check(gather(stage.object(), &b, &error), error, "gather_parameters");
    }
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
    args.grads = view_of(flat_->grads.narrow(0, int64_t(shard_begin_), int64_t(shard_numel())));
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
    for (const auto &[name, ms] : r.timers_ms) timer_totals_[name] += ms;
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
    std::memcpy(mine.data(), master_.data_ptr<float>(), shard_numel() * sizeof(float));
    comm_.all_gather(zf_tensor_view{mine.data(), mine.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                     zf_tensor_view{all.data(), all.size(), ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0}, nullptr);
    std::vector<float> full(flat_->params.numel(), 0.0f);
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
    json.key("world_size").value(comm_.world_size());
    json.key("communicator").value(comm_.name());
    json.key("samples_per_step").value(samples_per_step);
    json.key("initial_loss").value(s.initial_loss);
    json.key("final_loss").value(s.final_loss);
    json.key("timed_steps").value(timed_steps);
    json.key("mean_step_ms").value(s.mean_step_ms);
    json.key("samples_per_s").value(seconds > 0 ? double(samples_per_step) / seconds : 0.0);
    json.key("tokens_per_s").value(seconds > 0 ? double(samples_per_step) / seconds : 0.0);
    json.key("selected_column_fraction").value(selected_fraction_);
    json.key("mean_timers_ms").begin_object();
    for (const auto &[name, total] : timer_totals_) json.key(name).value(total / double(s.steps));
    json.end_object();
    json.key("peak_memory_bytes").begin_object();
    for (int tier = 0; tier < ZF_TIER_COUNT; ++tier) json.key(tier_name(tier)).value(runtime_.memory.peak(tier));
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
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<FlatBuffers> flat_;
  torch::Dtype dtype_ = torch::kFloat32;
  torch::Tensor master_;
  uint64_t shard_begin_ = 0, shard_end_ = 0;
  std::vector<zf_optimizer_range> ranges_;
  std::vector<zf_optimizer_group> groups_;
  int64_t micro_batch_ = 1, grad_accum_ = 1;
  int64_t samples_ = 0, tokens_ = 0;
  double selected_fraction_ = 0;
  std::map<std::string, double> timer_totals_;
};

}  // namespace

RunSummary train(const Config &config, Runtime &runtime, PluginRegistry &registry) {
  int64_t threads = config.integer("run", "threads");
  if (threads == 0)
    threads = std::max<int64_t>(1, int64_t(runtime.worker_cores.size()) / std::max(1, runtime.comm->local_size()));
  torch::set_num_threads(int(threads));
  Trainer trainer(config, runtime, registry);
  return trainer.run();
}

}  // namespace zf
