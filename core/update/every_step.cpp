#include "update/update_schedule.hpp"

#include "runtime/tensors.hpp"

#include <algorithm>

namespace zf {

EveryStep::EveryStep(UpdateBuffers &buffers, HostUpdate *host, int64_t *host_steps, uint64_t host_from)
    : buffers_(buffers), host_(host), host_steps_(host_steps), host_from_(host_from),
      host_ranges_(clip_ranges(buffers.job.ranges, host_from, buffers.numel())) {}

void EveryStep::drain_host() {
  if (host_) host_->drain();
}

void EveryStep::set_host_from(uint64_t host_from) {
  host_from_ = host_from;
  host_ranges_ = clip_ranges(buffers_.job.ranges, host_from, buffers_.numel());
}

void EveryStep::begin(const StepTensors &step) {
  step_ = step;
  if (!host_) return;
  host_->drain();  // the previous step's update, if deferred
  const int64_t count = host_steps_ ? ++*host_steps_ : step.step;
  HostJob job{host_ranges_, buffers_.groups, count, step.grad_scale, step.grads, step.params};
  job.begin = host_from_;
  job.end = buffers_.numel();
  host_->start_step(std::move(job), step.scale_known);
}

void EveryStep::gradients_final(uint64_t begin, uint64_t end, void *stream) {
  if (!host_ || !buffers_.job.overlapped) return;
  const uint64_t lo = std::max(begin, buffers_.shard_begin + host_from_), hi = std::min(end, buffers_.shard_end);
  if (lo < hi) host_->hand_over(lo - buffers_.shard_begin, hi - buffers_.shard_begin, stream);
}

// The host part goes first, so that the CPU works while the rest is updated beside it.
void EveryStep::finish(float mean_scale, float clip, bool defer) {
  const float grad_scale = mean_scale * clip;
  if (!host_) return update_on_device(grad_scale);
  host_->hand_over_rest(grad_scale);
  update_beside(grad_scale);
  if (!defer || !host_->threaded()) host_->drain();
}

void EveryStep::ready_for(uint64_t begin, uint64_t end) {
  if (host_) host_->ready_for(begin, end);
}

void EveryStep::finish_step() {
  if (host_) host_->finish_step();
}

void EveryStep::complete() {
  if (host_) host_->drain();
}

void EveryStep::restore(const torch::Tensor &params_shard) {
  torch::NoGradGuard no_grad;
  if (!params_are_master(params_shard)) params_shard.copy_(buffers_.master);
}

// One step over the shard where the model computes; an optimizer that writes the low-precision
// working parameters in its own pass saves the copy.
void EveryStep::update_on_device(float grad_scale) {
  const OptimizerPlugin &optimizer = buffers_.plugins.optimizer;
  const std::vector<zf_optimizer_range> &ranges = buffers_.job.ranges;
  zf_optimizer_step_args args =
      optimizer_step_args(ranges.data(), ranges.size(), buffers_.groups.data(), buffers_.groups.size(), step_.step,
                          grad_scale, view_of(buffers_.master), view_of(step_.grads));
  args.stream = buffers_.runtime.compute_stream;
  const torch::Tensor &params = step_.params;
  bool writes_params = optimizer.has(ZF_CAP_LOW_PRECISION_OUT) && params.scalar_type() != torch::kFloat32 &&
                       params.device() == buffers_.master.device();
  if (writes_params) args.params_out = view_of(params);
  optimizer.step(args);
  if (!writes_params && !params_are_master(params)) {
    torch::NoGradGuard no_grad;
    params.copy_(buffers_.master);
  }
}

}  // namespace zf
