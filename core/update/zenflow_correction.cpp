// zenflow_correction.cpp: zenflow.correction, what the staggered schedule does about the one step
// by which the other columns' CPU updates come late (docs/zenflow.md measures each):
// - lookahead: a group's CPU update is swapped in extrapolated, last + (1 + a) (new - last) with
//   a = correction_factor, so that the forward reads where the column is heading (a Nesterov-style
//   look-ahead, the gradient taken there); the master keeps the update itself, and the run ends on it.
// - age_gate: the gradient of the step whose end swapped a group's update in was computed at the
//   weights that update replaced; it enters the group's next window weighted by correction_factor
//   (0 drops it), and the window's mean divides by the weights.
// Both keep their state in the checkpoint, so a resumed run repeats the uninterrupted one.
#include "update/zenflow.hpp"

namespace zf {

// The group's CPU result from the start of staging_ into the working parameters (lookahead:
// extrapolated).
void ZenFlow::write_group(const Group &g) {
  const int64_t begin = int64_t(g.begin), length = int64_t(g.end - g.begin);
  torch::Tensor params = step_.params.narrow(0, begin, length), fresh = staging_.narrow(0, 0, length);
  if (!lookahead()) return void(params.copy_(fresh));
  torch::Tensor last = last_cpu_.narrow(0, begin, length);
  if (settling_ || options_.correction_factor == 0) params.copy_(fresh);
  else params.copy_(torch::lerp(last, fresh, 1.0 + options_.correction_factor));  // fresh + a (fresh - last)
  last.copy_(fresh);
}

// lookahead, before the columns change hands: the device's columns are where they are, exactly
// (the device updates them every step), so a column that leaves extrapolates from there. At the
// first selection every column is where it starts.
void ZenFlow::keep_leaving_columns() {
  if (!lookahead()) return;
  torch::NoGradGuard no_grad;
  if (!selected_ || whole()) last_cpu_.copy_(step_.params);
  else if (selection_.device_numel > 0) last_cpu_.index_copy_(0, index_, step_.params.index_select(0, index_));
}

// lookahead, at the end of the run: every other column back on its last CPU result, the device's
// columns on the device's values.
void ZenFlow::settle_lookahead() {
  if (!lookahead() || !selected_ || whole() || !step_.params.defined()) return;
  torch::NoGradGuard no_grad;
  step_.params.copy_(last_cpu_);
  if (selection_.device_numel == 0) return;
  step_.params.index_copy_(0, index_, params_out_.defined() ? params_out_ : master_);
}

// Checkpoints: each group's weight (age_gate), last_cpu_ (lookahead), and a 1 that says they were
// saved. Without them (no correction, or a checkpoint made without it) each window weighs its
// steps, and the look-ahead starts from the working parameters.
void ZenFlow::correction_state(std::vector<std::pair<std::string, torch::Tensor>> &out) {
  if (options_.correction == ZenFlowOptions::Correction::none) return;
  double *c = correction_.data_ptr<double>();
  for (size_t i = 0; i < groups_.size(); ++i) c[i] = groups_[i].weight;
  c[groups_.size()] = 1;
  out.emplace_back("zenflow.correction", correction_);
  if (lookahead()) out.emplace_back("zenflow.last_cpu_update", last_cpu_);
}

void ZenFlow::restore_correction(const torch::Tensor &params_shard) {
  double *c = correction_.defined() ? correction_.data_ptr<double>() : nullptr;
  const bool saved = c && c[groups_.size()] == 1;
  for (size_t i = 0; i < groups_.size(); ++i) groups_[i].weight = saved ? c[i] : double(groups_[i].summed);
  if (c) c[groups_.size()] = 0;
  torch::NoGradGuard no_grad;
  if (lookahead() && !saved && !(inheriting_ && inherited_.last_cpu_carried)) last_cpu_.copy_(params_shard);
}

}  // namespace zf
