// zenflow_staggered.cpp: ZenFlow's staggered schedule (zenflow.hpp): the shard in update_interval
// groups, one group's CPU update handed over per step and swapped in at the next; and the hand-over
// of a CPU update that both schedules share.
#include "update/zenflow.hpp"

#include "runtime/device.hpp"

#include <algorithm>

namespace zf {

// At most one CPU update is in flight: the staggered schedule's cover one group each (the largest
// sets the size; at 32B on 4 ranks with update_interval 4 a quarter of the shard's 15.3 GiB), the
// deepspeed schedule's the whole shard.
uint64_t ZenFlow::staging_numel() const {
  if (!options_.staggered) return buffers_.numel();
  uint64_t largest = 0;
  for (const Group &g : groups_) largest = std::max(largest, g.end - g.begin);
  return largest;
}

// The device's elements before shard element `element`: where a group's selected columns start in the
// compact tensors.
int64_t ZenFlow::compact_position(uint64_t element) const {
  uint64_t at = 0;
  for (const zf_optimizer_range &r : selection_.device) {
    if (r.begin >= element) break;
    at += std::min(r.end, element) - r.begin;
  }
  return int64_t(at);
}

// One group's CPU update per step: the one handed over at the last step is swapped in first
// (overlap), the next one goes to the update thread after this step's gradients are summed.
void ZenFlow::staggered_step(int64_t step, float clip) {
  if (inheriting_) settle_inherited();  // the first step after a checkpoint of another layout
  if (swap_group_ >= 0) swap_in_group();
  if (!selected_ || reselect_due(step)) {
    flush_groups();
    select(step);
  }
  update_selected(step, mean_scale_ * clip);
  if (whole()) return;  // the CPU has nothing to update
  accumulate_groups(clip);
  hand_over_group(size_t(next_group_));
  next_group_ = (next_group_ + 1) % int64_t(groups_.size());
  if (!options_.overlap && swap_group_ >= 0) swap_in_group();
}

// The step's gradients join each group's sum (scaled by the step's clipping factor); a group
// handed over since its last step starts a new sum, once its copy down has been issued.
void ZenFlow::accumulate_groups(float clip) {
  Timers &timers = buffers_.runtime.timers;
  void *stream = buffers_.runtime.compute_stream;
  uint32_t process = timers.id("selective_optimizer_process");
  timers.start(process, stream);
  if (sum_copied_pending_) wait_event(stream, host_.job_copies_done());
  sum_copied_pending_ = false;
  torch::NoGradGuard no_grad;
  for (Group &g : groups_) {
    const int64_t begin = int64_t(g.begin), length = int64_t(g.end - g.begin);
    torch::Tensor sum = sum_.narrow(0, begin, length), grads = step_.grads.narrow(0, begin, length);
    // age_gate: this step's forward ran before the group's last CPU update was swapped in.
    const double weight = age_gate() && g.swapped_at == step_.step ? options_.correction_factor : 1.0;
    if (weight == 0) continue;  // dropped: the window starts at the next step
    const float scale = weight == 1.0 ? clip : float(double(clip) * weight);
    if (g.summed > 0) sum.add_(grads, scale);
    else if (scale == 1.0f) sum.copy_(grads);
    else sum.copy_(grads.mul(scale));
    ++g.summed;
    g.weight += weight;
  }
  timers.stop(process, stream);
}

// The group's sum goes down; the CPU optimizer updates its other columns from their mean on the
// update thread and uploads the group into the staging buffer.
void ZenFlow::hand_over_group(size_t index) {
  if (hand_over_group(groups_[index])) swap_group_ = int64_t(index);
}

bool ZenFlow::hand_over_group(Group &g) {
  HostJob job;
  job.ranges = clip_ranges(selection_.host, g.begin, g.end);
  const int64_t summed = g.summed;
  const double weight = g.weight;
  g.summed = 0;
  g.weight = 0;
  if (job.ranges.empty() || summed == 0) return false;  // every column of the group is the device's
  job.begin = g.begin;
  job.end = g.end;
  job.step = options_.warm_up + ++g.updates;  // the warm-up's CPU steps updated every column
  ++host_updates_;
  hand_over(std::move(job), weight);
  return true;
}

// The group's CPU update replaces its working parameters, but for the device's columns.
void ZenFlow::swap_in_group() {
  swap_in_group(groups_[size_t(swap_group_)]);
  swap_group_ = -1;
}

void ZenFlow::swap_in_group(Group &g) {
  Timers &timers = buffers_.runtime.timers;
  uint32_t sync = timers.id("selective_optimizer_sync");
  timers.start(sync);
  host_.drain();
  synchronize_event(host_.transfers_done(ZF_TRANSFER_PARAMETERS_IN));  // before the next job writes their source
  torch::NoGradGuard no_grad;
  write_group(g);
  g.swapped_at = step_.step;
  if (g.compact_end > g.compact_begin) {
    const torch::Tensor &device_values = params_out_.defined() ? params_out_ : master_;
    const int64_t count = g.compact_end - g.compact_begin;
    step_.params.index_copy_(0, index_.narrow(0, g.compact_begin, count),
                                    device_values.narrow(0, g.compact_begin, count));
  }
  timers.stop(sync);
  note("swap");
}

// Every group's pending gradients to the CPU now, each swapped in at once, so that the host
// master holds every gradient (before a selection, and at the end of the run).
void ZenFlow::flush_groups() {
  for (size_t i = 0; i < groups_.size(); ++i) {
    hand_over_group(i);
    if (swap_group_ >= 0) swap_in_group();
  }
}

// A CPU update over job.ranges from the mean of the gradients in sum_ (weighing `weight`
// together: the steps summed, unless age_gate weighed one less), at the CPU update's learning
// rate, uploaded into staging_: the update thread issues the copies down.
void ZenFlow::hand_over(HostJob job, double weight) {
  job.groups = buffers_.groups;
  for (zf_optimizer_group &group : job.groups) group.lr = float(double(group.lr) * options_.cpu_lr_scale);
  job.scale = float(double(mean_scale_) / weight);
  job.grads = sum_;
  job.upload_to = staging_;
  job.upload_base = job.begin;  // staging_ holds the job's elements from its start
  job.upload_after = record_event(buffers_.runtime.compute_stream);  // staging_ read by the last swap
  job.grads_ready = record_event(buffers_.runtime.compute_stream);   // the sum is complete
  Timers &timers = buffers_.runtime.timers;
  uint32_t start = timers.id("cpu_update_start");  // the training thread hands the job over (host time)
  timers.start(start);
  host_.start_job(std::move(job));
  timers.stop(start);
  sum_copied_pending_ = true;
  note("cpu");
}

}  // namespace zf
