#include "update/host_update.hpp"

#include "update/disk_state.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/tensors.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <tuple>
#include <thread>

namespace zf {

// The CPU side of an offloaded update: buckets queue up as their gradients are copied down and
// one thread updates them in the queue's order, then starts their upload. The first failure is
// kept and rethrown on the training thread; the thread stops taking work after it.
class HostUpdate::UpdateThread {
 public:
  explicit UpdateThread(HostUpdate &plan)
      : plan_(plan), thread_([this] {
          use_device_on_this_thread(plan_.buffers_.runtime);
          loop();
        }) {}
  ~UpdateThread() { stop(); }
  // Takes no more work, ends the bucket under way and joins.
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void start_step(bool scale_known, bool newest_first) {
    std::lock_guard<std::mutex> lock(mutex_);
    scale_known_ = scale_known;
    queue_.start(newest_first);
    done_.clear();
  }
  void push(const Bucket &bucket) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push(bucket);
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
      queue_.backward_over();
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
  // A job's updates wait while held (the training thread launches the next forward).
  void hold(bool held) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      held_ = held;
    }
    changed_.notify_all();
  }
  // False once the thread is stopping: a held bucket is then dropped, not updated.
  bool wait_unheld() {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !held_ || stopping_; });
    return !stopping_;
  }
  // Until every bucket handed over is updated and its upload started.
  void drain() {
    std::unique_lock<std::mutex> lock(mutex_);
    held_ = false;
    changed_.notify_all();
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
      const Bucket bucket = queue_.take([](const Bucket &b) { return event_completed(b.landed); });
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

  HostUpdate &plan_;
  std::mutex mutex_;
  std::condition_variable changed_;
  UpdateQueue queue_;
  bool scale_known_ = false, busy_ = false, stopping_ = false, copies_issued_ = false, held_ = false;
  void *copies_event_ = nullptr;
  std::vector<uint8_t> done_;  // per bucket of this step (by sequence): updated and uploading
  std::exception_ptr failure_;
  std::thread thread_;  // last: starts once the members above exist
};

// The optimizer over `ranges` (shard elements), with views of the shard from element `base` to
// `end`: on the host, where its state covers [base, end) (a window of disk tiles, or all of it).
void HostUpdate::step_on_host(std::vector<zf_optimizer_range> ranges, uint64_t base, uint64_t end) {
  for (zf_optimizer_range &r : ranges) {
    r.begin -= base;
    r.end -= base;
  }
  auto part = [&](const torch::Tensor &t) { return view_of(t.narrow(0, int64_t(base), int64_t(end - base))); };
  zf_optimizer_step_args args =
      optimizer_step_args(ranges.data(), ranges.size(), host_job_.groups.data(), host_job_.groups.size(),
                          host_job_.step, host_job_.scale, part(buffers_.master), part(buffers_.host_grads));
  if (buffers_.params_out.defined()) args.params_out = part(buffers_.params_out);
  if (buffers_.writes_in_place) args.params_out = part(host_job_.upload_to);  // the working parameters, on the host
  uint64_t per_element = 2 * 4 + buffers_.host_grads.element_size();
  for (const StateSpec &spec : buffers_.state_specs) per_element += 2 * c10::elementSize(spec.dtype);
  if (buffers_.writes_in_place) per_element += host_job_.upload_to.element_size();
  else if (buffers_.params_out.defined()) per_element += buffers_.params_out.element_size();
  for (const zf_optimizer_range &r : ranges) bytes_streamed_ += (r.end - r.begin) * per_element;
  Timers &timers = buffers_.runtime.timers;
  const uint32_t update = timers.id("cpu_update");
  timers.start(update);
  buffers_.plugins.optimizer.step(args);
  timers.stop(update);
}

HostUpdate::HostUpdate(UpdateBuffers &buffers, bool threaded) : buffers_(buffers) {
  if (threaded) thread_ = std::make_unique<UpdateThread>(*this);
}

// The update thread stops (ending the bucket it updates) before the job and buckets it reads go:
// a run that stops on an error leaves here while a CPU update may still run.
HostUpdate::~HostUpdate() {
  if (thread_) thread_->stop();
}

void HostUpdate::start_step(HostJob job, bool scale_known) {
  host_job_ = std::move(job);
  job_ = false;
  scale_known_ = scale_known;
  handed_.clear();
  buckets_.clear();
  // Disk tiles keep the order handed over: the read-ahead follows it.
  if (thread_) thread_->start_step(scale_known, /*newest_first=*/!buffers_.disk);
}

// What the backward did not hand over (all of it without overlap, or on ranks whose gradients are
// final only after reduce_gradients), in forward order after the backward.
void HostUpdate::hand_over_rest(float scale) {
  if (!scale_known_) host_job_.scale = scale;  // the update thread waits for it (release_scale)
  std::sort(handed_.begin(), handed_.end());
  uint64_t next = host_job_.begin;
  std::vector<std::tuple<uint32_t, uint64_t, uint64_t>> rest;  // block, shard elements [lo, hi)
  // Cut where the next block in memory is not a later one in the forward (interleaved blocks).
  auto add_rest = [&](uint64_t lo, uint64_t hi) {
    for (uint64_t at = lo, to; at < hi; at = to) {
      const uint32_t first = buffers_.block_of(at);
      to = std::min(hi, buffers_.block_end(at));
      for (uint32_t block = first; to < hi && buffers_.block_of(to) > block;) {
        block = buffers_.block_of(to);
        to = std::min(hi, buffers_.block_end(to));
      }
      rest.emplace_back(first, at, to);
    }
  };
  for (const auto &[lo, hi] : handed_) {
    if (next < lo) add_rest(next, lo);
    next = std::max(next, hi);
  }
  if (next < host_job_.end) add_rest(next, host_job_.end);
  std::sort(rest.begin(), rest.end());
  void *stream = buffers_.runtime.compute_stream;
  for (const auto &[block, lo, hi] : rest) hand_over(lo, hi, stream);
  // The compute stream reuses the gradient memory only after the copies down have landed.
  wait_event(stream, transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
  if (thread_) thread_->release_scale();
  pending_ = true;
}

// The training thread only queues the buckets of [job.begin, job.end): the update thread issues
// their copies down (after host_job_.grads_ready) before it updates the first, so that the step
// goes on at once.
void HostUpdate::start_job(HostJob job) {
  drain();  // at most one job in flight
  host_job_ = std::move(job);
  job_ = true;
  handed_.clear();
  buckets_.clear();
  thread_->start_step(/*scale_known=*/true, /*newest_first=*/false);
  thread_->hold(true);
  thread_->expect_copies();
  for (uint64_t lo = host_job_.begin, hi; lo < host_job_.end; lo = hi) {
    hi = bucket_end(lo, host_job_.end);
    buckets_.push_back(Bucket{lo, hi, nullptr, uint64_t(buckets_.size()), buffers_.block_of(lo)});
  }
  for (const Bucket &b : buckets_) thread_->push(b);
  pending_ = true;
}

void *HostUpdate::job_copies_done() { return thread_->wait_copies(); }

void HostUpdate::release() {
  if (thread_) thread_->hold(false);
}

// On the update thread, once per ZenFlow job: every bucket's copy down, in order, on the offload
// plugin's stream after host_job_.grads_ready.
void HostUpdate::issue_copies() {
  if (!copy_order_ && buffers_.runtime.device == ZF_DEVICE_CUDA) copy_order_ = create_stream();
  wait_event(copy_order_, host_job_.grads_ready);
  host_job_.grads_ready = nullptr;
  landed_.clear();
  for (const Bucket &b : buckets_) {
    auto part = [&](const torch::Tensor &t) {
      return view_of(t.narrow(0, int64_t(b.begin), int64_t(b.end - b.begin)));
    };
    buffers_.plugins.offload.gradients_out(part(host_job_.grads), part(buffers_.host_grads), copy_order_);
    bytes_down_ += (b.end - b.begin) * host_job_.grads.element_size();
    landed_.push_back(transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
  }
  thread_->copies_issued(transfers_done(ZF_TRANSFER_GRADIENTS_OUT));
}

// Buckets are cut on a grid of bucket_size from the shard's start, so that each one is a disk
// tile when the state is on disk: the end of the bucket that starts at `lo`, at most `end`.
uint64_t HostUpdate::bucket_end(uint64_t lo, uint64_t end) const {
  const uint64_t bucket = buffers_.tiers.bucket_numel;
  return bucket ? std::min(end, (lo / bucket + 1) * bucket) : end;
}

// Starts the copies of [begin, end) down, bucket by bucket, and queues their updates.
void HostUpdate::hand_over(uint64_t begin, uint64_t end, void *stream) {
  handed_.emplace_back(begin, end);
  for (uint64_t lo = begin, hi; lo < end; lo = hi) {
    hi = bucket_end(lo, end);
    auto part = [&](const torch::Tensor &t) { return view_of(t.narrow(0, int64_t(lo), int64_t(hi - lo))); };
    buffers_.plugins.offload.gradients_out(part(host_job_.grads), part(buffers_.host_grads), stream);
    bytes_down_ += (hi - lo) * host_job_.grads.element_size();
    Bucket b{lo, hi, transfers_done(ZF_TRANSFER_GRADIENTS_OUT), uint64_t(buckets_.size()), buffers_.block_of(lo)};
    buckets_.push_back(b);
    if (thread_) thread_->push(b);
    else update_bucket(b);
  }
}

// Waits for the bucket's gradients, updates it, and starts its upload.
void HostUpdate::update_bucket(const Bucket &bucket) {
  Timers &timers = buffers_.runtime.timers;
  if (job_ && bucket.sequence == 0) issue_copies();
  uint32_t copy_wait = timers.id("grad_copy_wait");
  timers.start(copy_wait);
  synchronize_event(job_ ? landed_[bucket.sequence] : bucket.landed);
  timers.stop(copy_wait);
  if (job_) {
    uint32_t held = timers.id("cpu_update_held");
    timers.start(held);
    const bool go_on = thread_->wait_unheld();
    timers.stop(held);
    if (!go_on) return;
  }

  if (buffers_.disk) {
    buffers_.disk->update(bucket.begin, bucket.end, [&](uint64_t lo, uint64_t hi, uint64_t base) {
      step_on_host(clip_ranges(host_job_.ranges, lo, hi), base, hi);
    });
  } else {
    step_on_host(clip_ranges(host_job_.ranges, bucket.begin, bucket.end), 0, buffers_.numel());
  }

  if (buffers_.writes_in_place) return;  // the optimizer wrote the working parameters: nothing goes up
  const torch::Tensor &source = buffers_.params_out.defined() ? buffers_.params_out : buffers_.master;
  const int64_t count = int64_t(bucket.end - bucket.begin);
  const torch::Tensor from = source.narrow(0, int64_t(bucket.begin), count);
  const torch::Tensor to = host_job_.upload_to.narrow(0, int64_t(bucket.begin - host_job_.upload_base), count);
  if (host_job_.upload_after) synchronize_event(host_job_.upload_after);  // once per job
  host_job_.upload_after = nullptr;
  buffers_.plugins.offload.parameters_in(view_of(from), view_of(to), buffers_.runtime.compute_stream);
  bytes_up_ += (bucket.end - bucket.begin) * source.element_size();
}

void HostUpdate::ready_for(uint64_t begin, uint64_t end) {
  if (!pending_ || job_) return;
  uint64_t lo = std::max(begin, buffers_.shard_begin), hi = std::min(end, buffers_.shard_end);
  if (lo >= hi) return;
  lo -= buffers_.shard_begin;
  hi -= buffers_.shard_begin;
  std::vector<uint64_t> needed;
  for (const Bucket &b : buckets_)
    if (b.begin < hi && lo < b.end) needed.push_back(b.sequence);
  if (needed.empty()) return;
  Timers &timers = buffers_.runtime.timers;
  void *stream = buffers_.runtime.compute_stream;
  uint32_t wait = timers.id("update_wait");
  // How long the compute stream idles for it (the host's wait and the upload's), on that stream: the
  // GPU's own compute in the forward is fwd less this.
  uint32_t stall = timers.id("update_stall");
  timers.start(stall, stream);
  timers.start(wait);
  thread_->wait_for(needed);
  timers.stop(wait);
  wait_for_uploads();
  timers.stop(stall, stream);
}

void HostUpdate::drain() {
  if (!pending_) return;
  Timers &timers = buffers_.runtime.timers;
  uint32_t wait = timers.id("update_wait");  // the training thread waits for the CPU update
  timers.start(wait);
  if (thread_) thread_->drain();
  timers.stop(wait);
  pending_ = job_ = false;
  if (buffers_.disk) buffers_.disk->flush();  // the last tiles' writes
  wait_for_uploads();
}

void HostUpdate::finish_step() {
  if (!job_) drain();
}

// The compute stream reads the new parameters only after their uploads have landed.
void HostUpdate::wait_for_uploads() {
  Timers &timers = buffers_.runtime.timers;
  uint32_t param_wait = timers.id("param_copy_wait");  // the compute stream waits for the uploads
  timers.start(param_wait, buffers_.runtime.compute_stream);
  wait_event(buffers_.runtime.compute_stream, transfers_done(ZF_TRANSFER_PARAMETERS_IN));
  timers.stop(param_wait, buffers_.runtime.compute_stream);
}

void *HostUpdate::transfers_done(int32_t direction) { return buffers_.plugins.offload.transfers_done(direction); }

}  // namespace zf
