#include "engine/update_plan.hpp"

#include "engine/disk_state.hpp"
#include "engine/flat_buffers.hpp"
#include "engine/zenflow.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "plugin/plugin_entry.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

namespace zf {

std::vector<zf_optimizer_range> optimizer_ranges(const zf_layout &layout, uint64_t begin, uint64_t end) {
  std::vector<zf_optimizer_range> ranges;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &s = layout.segments[i];
    uint64_t seg_end = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : end;
    uint64_t lo = std::max(s.offset, begin), hi = std::min(seg_end, end);
    if (i == 0) lo = begin;  // leading elements of the shard belong to the first segment
    if (lo >= hi) continue;
    append_range(ranges, lo - begin, hi - begin, (s.flags & ZF_SEGMENT_NO_DECAY) ? 1 : 0);
  }
  return ranges;
}

void append_range(std::vector<zf_optimizer_range> &ranges, uint64_t lo, uint64_t hi, uint32_t group) {
  if (lo >= hi) return;
  if (!ranges.empty() && ranges.back().end == lo && ranges.back().group == group) ranges.back().end = hi;
  else ranges.push_back(zf_optimizer_range{lo, hi, group, 0});
}

bool on_host(zf_tier tier) { return tier == ZF_TIER_HOST || tier == ZF_TIER_PINNED_HOST; }

std::vector<StateSpec> host_held_state(PluginInstance &optimizer) {
  std::vector<StateSpec> specs;
  const auto *api = optimizer.api<zf_optimizer_api>();
  if (!ZF_HAS(zf_optimizer_api, api, bind_state) || !api->state_spec || !api->bind_state) return specs;
  for (uint32_t index = 0;; ++index) {
    const char *name = nullptr;
    zf_dtype dtype = ZF_DTYPE_F32;
    zf_error error{};
    const PluginEntry running(optimizer, "state_spec");
    zf_status status = api->state_spec(optimizer.object(), index, &name, &dtype, &error);
    if (status == ZF_DECLINED) break;
    optimizer.check(status, error, "state_spec");
    specs.push_back(StateSpec{name, torch_dtype(dtype)});
  }
  return specs;
}

std::vector<zf_optimizer_range> clip_ranges(const std::vector<zf_optimizer_range> &ranges, uint64_t begin,
                                            uint64_t end) {
  std::vector<zf_optimizer_range> out;
  auto first = std::lower_bound(ranges.begin(), ranges.end(), begin,
                                [](const zf_optimizer_range &r, uint64_t at) { return r.end <= at; });
  for (auto r = first; r != ranges.end() && r->begin < end; ++r)
    out.push_back(zf_optimizer_range{std::max(r->begin, begin), std::min(r->end, end), r->group, 0});
  return out;
}

// The CPU side of an offloaded update: buckets queue up as their gradients are copied down and
// one thread updates them in order, then starts their upload. The first failure is kept and
// rethrown on the training thread; the thread stops taking work after it.
class UpdatePlan::UpdateThread {
 public:
  explicit UpdateThread(UpdatePlan &plan)
      : plan_(plan), thread_([this] {
          use_device_on_this_thread(plan_.runtime_);
          loop();
        }) {}
  ~UpdateThread() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }
  void start_step(bool scale_known) {
    std::lock_guard<std::mutex> lock(mutex_);
    scale_known_ = scale_known;
    done_.clear();
  }
  void push(const Bucket &bucket) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(bucket);
      done_.resize(std::max<size_t>(done_.size(), bucket.sequence + 1), 0);
    }
    changed_.notify_all();
  }
  // The backward is over: the scale is known, and what is still queued goes in forward order
  // (the next forward needs the first blocks first).
  void release_scale() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      scale_known_ = true;
      std::sort(queue_.begin(), queue_.end(), [](const Bucket &a, const Bucket &b) { return a.begin < b.begin; });
    }
    changed_.notify_all();
  }
  // Until these buckets are updated and their uploads started.
  void wait_for(const std::vector<uint64_t> &sequences) {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] {
      return failure_ || std::all_of(sequences.begin(), sequences.end(), [&](uint64_t i) { return done_[i] != 0; });
    });
    if (failure_) rethrow(lock);
  }
  // ZenFlow: the update thread issued the job's copies down; `event` follows them.
  void copies_issued(void *event) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      copies_event_ = event;
      copies_issued_ = true;
    }
    changed_.notify_all();
  }
  // Until the job's copies down are issued: an event after them (NULL on CPU runs), once.
  void *wait_copies() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return copies_issued_ || failure_; });
    if (failure_) rethrow(lock);
    void *event = copies_event_;
    copies_event_ = nullptr;
    return event;
  }
  void expect_copies() {
    std::lock_guard<std::mutex> lock(mutex_);
    synchronize_event(copies_event_);  // an event nobody waited for goes back to the pool
    copies_event_ = nullptr;
    copies_issued_ = false;
  }
  // Until every bucket handed over is updated and its upload started.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return (queue_.empty() && !busy_) || failure_; });
    if (failure_) rethrow(lock);
  }

 private:
  void rethrow(std::unique_lock<std::mutex> &) {
    std::exception_ptr failure = failure_;
    failure_ = nullptr;
    queue_.clear();
    std::rethrow_exception(failure);
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || (!queue_.empty() && scale_known_ && !failure_); });
      if (stopping_) return;
      Bucket bucket = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      try {
        plan_.update_bucket(bucket);
      } catch (...) {
        lock.lock();
        failure_ = std::current_exception();
        busy_ = false;
        changed_.notify_all();
        continue;
      }
      lock.lock();
      busy_ = false;
      done_[bucket.sequence] = 1;
      changed_.notify_all();
    }
  }

  UpdatePlan &plan_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Bucket> queue_;
  bool scale_known_ = false, busy_ = false, stopping_ = false, copies_issued_ = false;
  void *copies_event_ = nullptr;
  std::vector<uint8_t> done_;  // per bucket of this step (by sequence): updated and uploading
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts once the members above exist
};

UpdatePlan::UpdatePlan(Runtime &runtime, PluginSet &plugins, const zf_layout &layout, uint64_t shard_begin,
                       uint64_t shard_end, torch::Dtype dtype, zf_tier model_tier, const OptimizerSettings &settings,
                       const ZenFlowOptions &zenflow)
    : runtime_(runtime), plugins_(plugins), shard_begin_(shard_begin), shard_end_(shard_end), dtype_(dtype),
      model_tier_(model_tier) {
  auto &offload = *plugins_.offload.instance;
  tiers_.struct_size = sizeof tiers_;
  tiers_.param_out_tier = model_tier;  // defaults for offload plugins older than ABI 1.3 (1.5: param_tier)
  tiers_.param_tier = model_tier;
  {
    zf_error error{};
    const PluginEntry running(offload, "plan");
    offload.check(offload.api<zf_offload_api>()->plan(offload.object(), &layout, shard_end - shard_begin, &tiers_,
                                                      &error),
                  error, "plan");
  }
  offloaded_ = tiers_.master_tier != model_tier;
  check_optimizer_fits();
  ZF_REQUIRE(tiers_.param_tier == model_tier || (on_host(tiers_.param_tier) && on_host(tiers_.master_tier)),
             "offload plugin '%s' put the working parameters on tier %s: they can live where the model computes, "
             "or in host memory beside the master (which it keeps on tier %s)",
             offload.name(), tier_name(tiers_.param_tier), tier_name(tiers_.master_tier));
  writes_in_place_ = offloaded_ && tiers_.param_tier != model_tier && tiers_.param_out_tier == tiers_.param_tier &&
                     dtype != torch::kFloat32;
  ZF_REQUIRE(!zenflow.enabled || tiers_.param_tier == model_tier,
             "offload plugin '%s' keeps the working parameters in host memory, but ZenFlow updates the selected "
             "columns where the model computes every step: use offload.plugin = \"cpu_optimizer\" or \"nvme\" with "
             "[zenflow]", offload.name());

  job_.device = on_host(tiers_.master_tier) ? ZF_DEVICE_CPU : ZF_DEVICE_CUDA;
  job_.ranges = optimizer_ranges(layout, shard_begin, shard_end);
  job_.overlapped = offloaded_ && tiers_.overlap;
  zf_optimizer_group decay{float(settings.lr), float(settings.beta1), float(settings.beta2), float(settings.eps),
                           float(settings.weight_decay), {}};
  zf_optimizer_group no_decay = decay;
  no_decay.weight_decay = 0;
  groups_ = {decay, no_decay};

  const uint64_t numel = shard_end - shard_begin, element = c10::elementSize(dtype);
  planned_.push_back({tiers_.master_tier, "master", numel * 4});
  auto &optimizer = *plugins_.optimizer.instance;
  state_specs_ = host_held_state(optimizer);
  for (const StateSpec &spec : state_specs_)
    planned_.push_back({tiers_.state_tier, format("%s.%s", optimizer.name(), spec.name.c_str()),
                        numel * c10::elementSize(spec.dtype)});
  if (tiers_.state_tier == ZF_TIER_NVME) {
    ZF_REQUIRE(!state_specs_.empty() && on_host(tiers_.master_tier),
               "offload plugin '%s' puts the optimizer state on disk, which needs the master in host memory and an "
               "optimizer that lets the host hold its state (cpu_adam, cpu_lion, cpu_adagrad); '%s' does not",
               offload.name(), optimizer.name());
    disk_ = std::make_unique<DiskState>(runtime_, offload, state_specs_, numel,
                                        tiers_.bucket_numel ? tiers_.bucket_numel : numel);
    tiers_.bucket_numel = disk_->tile_numel();  // a bucket is a tile
    for (const StateSpec &spec : state_specs_)
      planned_.push_back({tiers_.master_tier, format("%s.%s (disk tiles)", optimizer.name(), spec.name.c_str()),
                          disk_->window_numel() * c10::elementSize(spec.dtype)});
  }
  if (state_specs_.empty())  // an optimizer older than ABI 1.3 allocates its own state: assume Adam's
    planned_.push_back({tiers_.state_tier, format("%s.state (estimated, 8 bytes per element)", optimizer.name()),
                        numel * 8});
  if (offloaded_) {
    planned_.push_back({tiers_.grad_tier, "grads.offload", numel * element});
    if (dtype != torch::kFloat32 && !writes_in_place_)
      planned_.push_back({tiers_.param_out_tier, "params.offload", numel * element});
  }
  if (zenflow.enabled) {
    zenflow_ = std::make_unique<ZenFlow>(*this, layout, zenflow);
    zenflow_->add_planned(planned_);
  }
}

UpdatePlan::~UpdatePlan() = default;

// The optimizer must run where the master lives, and an offloaded bf16/fp16 run needs an
// optimizer that writes the compute-precision copy in its pass.
void UpdatePlan::check_optimizer_fits() {
  auto &offload = *plugins_.offload.instance;
  auto &optimizer = *plugins_.optimizer.instance;
  const uint64_t caps = optimizer.file().descriptor->capabilities;
  if (on_host(tiers_.master_tier)) {
    ZF_REQUIRE(caps & ZF_CAP_CPU,
               "optimizer plugin '%s' runs on the GPU but offload plugin '%s' keeps the master weights in host "
               "memory: use a CPU optimizer (optimizer.plugin = \"cpu_adam\", \"cpu_lion\" or \"cpu_adagrad\")",
               optimizer.name(), offload.name());
  } else {
    ZF_REQUIRE(tiers_.master_tier == ZF_TIER_DEVICE && runtime_.device == ZF_DEVICE_CUDA,
               "offload plugin '%s' put the master weights on tier %s, which this %s run does not have",
               offload.name(), tier_name(tiers_.master_tier), runtime_.device == ZF_DEVICE_CUDA ? "GPU" : "CPU");
    ZF_REQUIRE(caps & ZF_CAP_CUDA,
               "optimizer plugin '%s' runs on the CPU but run.device = \"cuda\" keeps the master weights on the "
               "GPU: use optimizer.plugin = \"gpu_adam\", or offload.plugin = \"cpu_optimizer\" to update on the CPU",
               optimizer.name());
  }
  if (!offloaded_) return;
  const auto *api = offload.api<zf_offload_api>();
  ZF_REQUIRE(api->gradients_out && api->parameters_in,
             "offload plugin '%s' keeps the master weights on tier %s but does not move gradients and parameters "
             "(gradients_out, parameters_in)", offload.name(), tier_name(tiers_.master_tier));
  ZF_REQUIRE(dtype_ == torch::kFloat32 || (caps & ZF_CAP_LOW_PRECISION_OUT),
             "optimizer plugin '%s' cannot write %s parameters in its step (ZF_CAP_LOW_PRECISION_OUT), which offload "
             "plugin '%s' needs: use cpu_adam, cpu_lion or cpu_adagrad",
             optimizer.name(), c10::toString(dtype_), offload.name());
}

void UpdatePlan::allocate(const torch::Tensor &params_shard) {
  MemoryLedger &ledger = runtime_.memory;
  const uint64_t numel = shard_end_ - shard_begin_;
  master = ledger_tensor(ledger, tiers_.master_tier, numel, torch::kFloat32, "master");
  master.copy_(params_shard);
  auto &optimizer = *plugins_.optimizer.instance;
  const auto *api = optimizer.api<zf_optimizer_api>();
  zf_error error{};
  if (state_specs_.empty()) {  // an optimizer that keeps its state itself (ABI 1.0-1.2)
    const PluginEntry running(optimizer, "init_state");
    optimizer.check(api->init_state(optimizer.object(), numel, &error), error, "init_state");
  } else {
    std::vector<zf_tensor_view> views;
    const size_t count = state_specs_.size();
    if (disk_) {  // the optimizer works on a window of a few tiles
      std::vector<std::string> tags;
      for (size_t i = 0; i < count; ++i) tags.push_back(planned_[1 + count + i].tag);
      state_ = disk_->allocate(tiers_.master_tier, tags);
    }
    for (size_t i = 0; i < count; ++i) {
      // The optimizer writes the initial values (its workers first-touch the pages).
      if (!disk_)
        state_.push_back(ledger_tensor(ledger, tiers_.state_tier, numel, state_specs_[i].dtype, planned_[1 + i].tag,
                                       /*zero=*/false));
      views.push_back(view_of(state_[i]));
    }
    const uint64_t bound = disk_ ? disk_->window_numel() : numel;
    {
      const PluginEntry running(optimizer, "bind_state");
      optimizer.check(api->bind_state(optimizer.object(), bound, views.data(), uint32_t(views.size()), &error),
                      error, "bind_state");
    }
    if (disk_) disk_->write_initial();
  }
  if (!offloaded_) return;
  host_grads_ = ledger_tensor(ledger, tiers_.grad_tier, numel, dtype_, "grads.offload", /*zero=*/false);
  if (dtype_ != torch::kFloat32 && !writes_in_place_)
    params_out_ = ledger_tensor(ledger, tiers_.param_out_tier, numel, dtype_, "params.offload", /*zero=*/false);
  if (job_.overlapped || zenflow_) thread_ = std::make_unique<UpdateThread>(*this);
  if (zenflow_) zenflow_->allocate();
}

// The optimizer over `ranges` (shard elements), with views of the shard from element `base` to
// `end`: on the host, where its state covers [base, end) (a window of disk tiles, or all of it).
void UpdatePlan::step_on_host(std::vector<zf_optimizer_range> ranges, uint64_t base, uint64_t end) {
  for (zf_optimizer_range &r : ranges) {
    r.begin -= base;
    r.end -= base;
  }
  auto part = [&](const torch::Tensor &t) { return view_of(t.narrow(0, int64_t(base), int64_t(end - base))); };
  zf_optimizer_step_args args =
      optimizer_step_args(ranges.data(), ranges.size(), host_job_.groups.data(), host_job_.groups.size(),
                          host_job_.step, host_job_.scale, part(master), part(host_grads_));
  if (params_out_.defined()) args.params_out = part(params_out_);
  if (writes_in_place_) args.params_out = part(host_job_.upload_to);  // the working parameters, in host memory
  Timers &timers = runtime_.timers;
  const uint32_t update = timers.id("cpu_update");
  timers.start(update);
  auto &optimizer = *plugins_.optimizer.instance;
  zf_error error{};
  const PluginEntry running(optimizer, "step");
  optimizer.check(optimizer.api<zf_optimizer_api>()->step(optimizer.object(), &args, &error), error, "step");
  timers.stop(update);
}

void UpdatePlan::begin(int64_t step, double lr, const torch::Tensor &params_shard, const torch::Tensor &grads_shard,
                       bool scale_known, float grad_scale) {
  // The previous step's update, if deferred; ZenFlow's CPU update goes on across steps.
  const bool zenflow = zenflow_ && zenflow_->active(step);
  if (!zenflow || (pending_ && !zenflow_job_)) drain();
  step_ = step;
  scale_known_ = scale_known;
  for (zf_optimizer_group &group : groups_) group.lr = float(lr);
  params_shard_ = params_shard;
  grads_shard_ = grads_shard;
  if (zenflow_) zenflow_->begin_step();
  if (zenflow) return;
  handed_.clear();
  buckets_.clear();
  host_job_ = HostJob{job_.ranges, groups_, zenflow_ ? zenflow_->next_host_step() : step, grad_scale,
                      grads_shard, params_shard, nullptr};
  if (thread_) thread_->start_step(scale_known);
}

// The training thread only queues the buckets of [job.begin, job.end): the update thread issues
// their copies down (after host_job_.grads_ready) before it updates the first, so that the step
// goes on at once.
void UpdatePlan::start_host_job(HostJob job) {
  drain();  // at most one job in flight
  host_job_ = std::move(job);
  host_job_.copies_on_update_thread = true;
  handed_.clear();
  buckets_.clear();
  thread_->start_step(/*scale_known=*/true);
  thread_->expect_copies();
  for (uint64_t lo = host_job_.begin, hi; lo < host_job_.end; lo = hi) {
    hi = bucket_end(lo, host_job_.end);
    buckets_.push_back(Bucket{lo, hi, nullptr, uint64_t(buckets_.size())});
  }
  for (const Bucket &b : buckets_) thread_->push(b);
  pending_ = zenflow_job_ = true;
}

void *UpdatePlan::job_copies_done() { return thread_->wait_copies(); }

// On the update thread, once per ZenFlow job: every bucket's copy down, in order, on the offload
// plugin's stream after host_job_.grads_ready.
void UpdatePlan::issue_copies() {
  auto &offload = *plugins_.offload.instance;
  const auto *api = offload.api<zf_offload_api>();
  if (!copy_order_ && runtime_.device == ZF_DEVICE_CUDA) copy_order_ = create_stream();
  wait_event(copy_order_, host_job_.grads_ready);
  host_job_.grads_ready = nullptr;
  landed_.clear();
  for (const Bucket &b : buckets_) {
    zf_error error{};
    auto part = [&](const torch::Tensor &t) { return view_of(t.narrow(0, int64_t(b.begin), int64_t(b.end - b.begin))); };
    const PluginEntry running(offload, "gradients_out");
    offload.check(api->gradients_out(offload.object(), part(host_job_.grads), part(host_grads_), copy_order_, &error),
                  error, "gradients_out");
    bytes_down_ += (b.end - b.begin) * host_job_.grads.element_size();
    landed_.push_back(transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
  }
  thread_->copies_issued(transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
}

void UpdatePlan::gradients_final(uint64_t begin, uint64_t end, void *stream) {
  if (!job_.overlapped || (zenflow_ && zenflow_->active(step_))) return;
  uint64_t lo = std::max(begin, shard_begin_), hi = std::min(end, shard_end_);
  if (lo < hi) hand_over(lo - shard_begin_, hi - shard_begin_, stream);
}

// Buckets are cut on a grid of bucket_size from the shard's start, so that each one is a disk
// tile when the state is on disk: the end of the bucket that starts at `lo`, at most `end`.
uint64_t UpdatePlan::bucket_end(uint64_t lo, uint64_t end) const {
  const uint64_t bucket = tiers_.bucket_numel;
  return bucket ? std::min(end, (lo / bucket + 1) * bucket) : end;
}

// Starts the copies of [begin, end) down, bucket by bucket, and queues their updates.
void UpdatePlan::hand_over(uint64_t begin, uint64_t end, void *stream) {
  auto &offload = *plugins_.offload.instance;
  const auto *api = offload.api<zf_offload_api>();
  handed_.emplace_back(begin, end);
  for (uint64_t lo = begin, hi; lo < end; lo = hi) {
    hi = bucket_end(lo, end);
    zf_error error{};
    auto part = [&](const torch::Tensor &t) { return view_of(t.narrow(0, int64_t(lo), int64_t(hi - lo))); };
    const PluginEntry running(offload, "gradients_out");
    offload.check(api->gradients_out(offload.object(), part(host_job_.grads), part(host_grads_), stream, &error),
                  error, "gradients_out");
    bytes_down_ += (hi - lo) * host_job_.grads.element_size();
    Bucket b{lo, hi, transfers_done(ZF_TRANSFER_GRADIENTS_OUT), uint64_t(buckets_.size())};
    buckets_.push_back(b);
    if (thread_) thread_->push(b);
    else update_bucket(b);
  }
}

// Waits for the bucket's gradients, updates it, and starts its upload.
void UpdatePlan::update_bucket(const Bucket &bucket) {
  Timers &timers = runtime_.timers;
  if (host_job_.copies_on_update_thread && bucket.sequence == 0) issue_copies();
  uint32_t copy_wait = timers.id("grad_copy_wait");
  timers.start(copy_wait);
  synchronize_event(host_job_.copies_on_update_thread ? landed_[bucket.sequence] : bucket.landed);
  timers.stop(copy_wait);

  if (disk_) {
    disk_->update(bucket.begin, bucket.end, [&](uint64_t lo, uint64_t hi, uint64_t base) {
      step_on_host(clip_ranges(host_job_.ranges, lo, hi), base, hi);
    });
  } else {
    step_on_host(clip_ranges(host_job_.ranges, bucket.begin, bucket.end), 0, shard_end_ - shard_begin_);
  }

  if (writes_in_place_) return;  // the optimizer wrote the working parameters: nothing goes up
  zf_error error{};
  auto &offload = *plugins_.offload.instance;
  const torch::Tensor &source = params_out_.defined() ? params_out_ : master;
  auto part = [&](const torch::Tensor &t) {
    return view_of(t.narrow(0, int64_t(bucket.begin), int64_t(bucket.end - bucket.begin)));
  };
  if (host_job_.upload_after) synchronize_event(host_job_.upload_after);  // once per job
  host_job_.upload_after = nullptr;
  const PluginEntry running(offload, "parameters_in");
  offload.check(offload.api<zf_offload_api>()->parameters_in(offload.object(), part(source),
                                                             part(host_job_.upload_to), runtime_.compute_stream,
                                                             &error),
                error, "parameters_in");
  bytes_up_ += (bucket.end - bucket.begin) * source.element_size();
}

void UpdatePlan::finish(float mean_scale, float clip, bool defer) {
  if (zenflow_ && zenflow_->active(step_)) return zenflow_->step(step_, mean_scale, clip);
  const float grad_scale = mean_scale * clip;
  if (!scale_known_) host_job_.scale = grad_scale;  // the update thread waits for it (release_scale)
  if (zenflow_) {  // a warm-up step: plain synchronous offload
    zenflow_->note("cpu");
    defer = false;
  }
  if (!offloaded_) return update_on_device(grad_scale);
  // What the backward did not hand over (all of it without overlap, or on ranks whose gradients
  // are final only after reduce_gradients), in forward order after the backward.
  std::sort(handed_.begin(), handed_.end());
  uint64_t next = 0;
  std::vector<std::pair<uint64_t, uint64_t>> rest;
  for (const auto &[lo, hi] : handed_) {
    if (next < lo) rest.emplace_back(next, lo);
    next = std::max(next, hi);
  }
  if (next < shard_end_ - shard_begin_) rest.emplace_back(next, shard_end_ - shard_begin_);
  for (const auto &[lo, hi] : rest) hand_over(lo, hi, runtime_.compute_stream);

  // The compute stream reuses the gradient memory only after the copies down have landed.
  wait_event(runtime_.compute_stream, transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
  if (thread_) thread_->release_scale();
  pending_ = true;
  if (!defer || !thread_) drain();
}

void UpdatePlan::ready_for(uint64_t begin, uint64_t end) {
  if (!pending_ || zenflow_job_) return;
  uint64_t lo = std::max(begin, shard_begin_), hi = std::min(end, shard_end_);
  if (lo >= hi) return;
  lo -= shard_begin_;
  hi -= shard_begin_;
  std::vector<uint64_t> needed;
  for (const Bucket &b : buckets_)
    if (b.begin < hi && lo < b.end) needed.push_back(b.sequence);
  if (needed.empty()) return;
  Timers &timers = runtime_.timers;
  uint32_t wait = timers.id("update_wait");
  timers.start(wait);
  thread_->wait_for(needed);
  timers.stop(wait);
  wait_for_uploads();
}

void UpdatePlan::drain() {
  if (!pending_) return;
  Timers &timers = runtime_.timers;
  uint32_t wait = timers.id("update_wait");  // the training thread waits for the CPU update
  timers.start(wait);
  if (thread_) thread_->drain();
  timers.stop(wait);
  pending_ = zenflow_job_ = false;
  if (disk_) disk_->flush();  // the last tiles' writes
  wait_for_uploads();
}

void UpdatePlan::finish_step() {
  if (!zenflow_job_) drain();
}

void UpdatePlan::complete() {
  drain();
  if (zenflow_) zenflow_->complete();
}

std::string UpdatePlan::events() const { return zenflow_ ? zenflow_->events() : std::string(); }

std::vector<std::pair<std::string, double>> UpdatePlan::facts() const {
  std::vector<std::pair<std::string, double>> out = {{"offload_bytes_down", double(bytes_down_)},
                                                     {"offload_bytes_up", double(bytes_up_)}};
  if (disk_) {
    out.emplace_back("nvme_bytes_read", double(disk_->bytes_read()));
    out.emplace_back("nvme_bytes_written", double(disk_->bytes_written()));
  }
  if (zenflow_)
    for (const auto &fact : zenflow_->facts()) out.push_back(fact);
  return out;
}

double UpdatePlan::selected_fraction() const { return zenflow_ ? zenflow_->selected_fraction() : 0.0; }

// The compute stream reads the new parameters only after their uploads have landed.
void UpdatePlan::wait_for_uploads() {
  Timers &timers = runtime_.timers;
  uint32_t param_wait = timers.id("param_copy_wait");  // the compute stream waits for the uploads
  timers.start(param_wait, runtime_.compute_stream);
  wait_event(runtime_.compute_stream, transfers_done(ZF_TRANSFER_PARAMETERS_IN));
  timers.stop(param_wait, runtime_.compute_stream);
}

// An event after the transfers of `direction` started so far (NULL on CPU runs); an offload plugin
// without transfer_event (older than ABI 1.3) is waited for here instead, and NULL comes back.
void *UpdatePlan::transfers_done(int32_t direction) {
  auto &offload = *plugins_.offload.instance;
  const auto *api = offload.api<zf_offload_api>();
  zf_error error{};
  void *event = nullptr;
  const bool has_event = ZF_HAS(zf_offload_api, api, transfer_event) && api->transfer_event;
  const PluginEntry running(offload, has_event ? "transfer_event" : "wait");
  if (has_event)
    offload.check(api->transfer_event(offload.object(), direction, &event, &error), error, "transfer_event");
  else if (api->wait)
    offload.check(api->wait(offload.object(), &error), error, "wait");
  return event;
}

// No offload: one step over the shard where the model computes; an optimizer that writes the
// low-precision working parameters in its own pass saves the copy.
void UpdatePlan::update_on_device(float grad_scale) {
  auto &optimizer = *plugins_.optimizer.instance;
  zf_optimizer_step_args args =
      optimizer_step_args(job_.ranges.data(), job_.ranges.size(), groups_.data(), groups_.size(), step_, grad_scale,
                          view_of(master), view_of(grads_shard_));
  args.stream = runtime_.compute_stream;
  bool writes_params = (optimizer.file().descriptor->capabilities & ZF_CAP_LOW_PRECISION_OUT) &&
                       params_shard_.scalar_type() != torch::kFloat32 && params_shard_.device() == master.device();
  if (writes_params) args.params_out = view_of(params_shard_);
  {
    zf_error error{};
    const PluginEntry running(optimizer, "step");
    optimizer.check(optimizer.api<zf_optimizer_api>()->step(optimizer.object(), &args, &error), error, "step");
  }
  if (!writes_params && !params_are_master(params_shard_)) {
    torch::NoGradGuard no_grad;
    params_shard_.copy_(master);
  }
}

}  // namespace zf
