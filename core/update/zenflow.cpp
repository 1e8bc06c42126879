#include "update/zenflow.hpp"

#include "config/limits.hpp"
#include "update/disk_state.hpp"
#include "update/zenflow_estimate.hpp"
#include "runtime/tensors.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace zf {

namespace {

// The host side of the update, which ZenFlow's CPU updates need.
HostUpdate &host_side(const UpdateBuffers &buffers, HostUpdate *host) {
  const char *offload = buffers.plugins.offload.name();
  const PluginSet &plugins = buffers.plugins;
  ZF_REQUIRE(host && buffers.offloaded && on_host(buffers.tiers.master_tier),
             "[zenflow] updates the unselected columns on the CPU, so it needs an offload plugin that keeps the master "
             "weights in host memory and moves gradients and parameters (%s), not '%s'",
             plugins.installed_with(ZF_KIND_OFFLOAD, {0, kMovesData, nullptr, kParamsOnHost}).c_str(), offload);
  ZF_REQUIRE(buffers.tiers.param_tier == buffers.model_tier,
             "offload plugin '%s' keeps the working parameters in host memory, but [zenflow] updates the selected "
             "columns where the model computes every step: use an offload plugin that keeps them there and the master "
             "weights in host memory (%s)",
             offload, plugins.installed_with(ZF_KIND_OFFLOAD, {0, kMovesData, nullptr, kParamsOnHost}).c_str());
  return *host;
}

// index[p] = the shard element at compact position p, for `ranges` in shard order. Built a slice
// at a time: its temporaries stay small beside the index (topk_ratio = "auto" fills the GPU).
void fill_index(torch::Tensor &index, const std::vector<zf_optimizer_range> &ranges) {
  constexpr int64_t kSlice = int64_t(1) << 24;
  std::vector<int64_t> starts, lengths;
  int64_t position = 0, pending = 0;
  auto flush = [&] {
    if (pending == 0) return;
    torch::Tensor start = torch::tensor(starts).to(index.device()), length = torch::tensor(lengths).to(index.device());
    index.narrow(0, position, pending)
        .copy_(torch::arange(pending, start.options()) +
               torch::repeat_interleave(start - (length.cumsum(0) - length), length));
    position += pending;
    pending = 0;
    starts.clear();
    lengths.clear();
  };
  for (const zf_optimizer_range &r : ranges)
    for (uint64_t lo = r.begin; lo < r.end; lo += uint64_t(kSlice)) {  // a long range in pieces
      const int64_t length = int64_t(std::min(r.end - lo, uint64_t(kSlice)));
      if (pending + length > kSlice) flush();
      starts.push_back(int64_t(lo));
      lengths.push_back(length);
      pending += length;
    }
  flush();
}

}  // namespace

ZenFlow::ZenFlow(UpdateBuffers &buffers, HostUpdate *host, const zf_layout &layout, const ZenFlowOptions &options)
    : buffers_(buffers), host_(host_side(buffers, host)), layout_(layout), options_(options),
      columns_(column_count(layout)), optimizer_(buffers.plugins.device_optimizer()),
      auto_topk_(options.topk_ratio == 0), warm_up_(buffers, host, &host_updates_) {
  host_state_of_ = buffers_.held_state_of(optimizer_, "[zenflow] moves each column's optimizer state");
  state_specs_ = optimizer_.state_specs();
  if (options_.staggered) {
    // U groups of about equal size, of whole buckets (on disk a bucket is a tile) when there are
    // enough of them: the same groups whatever the tier, for the same bucket size.
    const uint64_t numel = buffers_.numel(), count = uint64_t(options_.update_interval);
    const std::vector<uint64_t> ends = zenflow_group_ends(numel, count, buffers_.tiers.bucket_numel);
    groups_.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      groups_[k].begin = k == 0 ? 0 : groups_[k - 1].end;
      groups_[k].end = ends[k];
    }
    group_counters_ = torch::zeros({int64_t(2 * count + 2)}, torch::kLong);
    group_bounds_ = torch::empty({int64_t(count + 1)}, torch::kLong);
    for (uint64_t k = 0; k <= count; ++k) group_bounds_.data_ptr<int64_t>()[k] = int64_t(k < count ? groups_[k].begin : numel);
  }
}

ZenFlow::~ZenFlow() = default;

void ZenFlow::add_planned(std::vector<PlannedBuffer> &planned) const {
  const uint64_t numel = buffers_.numel(), element = c10::elementSize(buffers_.dtype);
  const zf_tier tier = buffers_.model_tier;
  planned.push_back({tier, "zenflow.gradient_sum", numel * c10::elementSize(buffers_.grad_dtype)});
  planned.push_back({tier, "zenflow.staging", staging_numel() * element});
  if (lookahead()) planned.push_back({tier, "zenflow.last_cpu_update", numel * element});
  // auto: at least, its tokens chosen among; a fixed topk: the embedding whole (zenflow_topk.cpp)
  const double topk = auto_topk_ ? kMinAutoTopk : options_.topk_ratio;
  const uint64_t selected = selected_numel(layout_, buffers_.shard_begin, buffers_.shard_end, topk, !auto_topk_);
  planned.push_back({tier, auto_topk_ ? "zenflow.selected (topk auto: at least)" : "zenflow.selected (estimated)",
                     selected * selected_element_bytes()});
}

void ZenFlow::allocate() {
  const uint64_t numel = buffers_.numel();
  MemoryLedger &ledger = buffers_.runtime.memory;
  sum_ = ledger_tensor(ledger, buffers_.model_tier, numel, buffers_.grad_dtype, "zenflow.gradient_sum");  // fp32 too
  staging_ = ledger_tensor(ledger, buffers_.model_tier, staging_numel(), buffers_.dtype, "zenflow.staging");
  counters_ = torch::zeros({6}, torch::kLong);
  if (lookahead()) last_cpu_ = ledger_tensor(ledger, buffers_.model_tier, numel, buffers_.dtype, "zenflow.last_cpu_update");
  if (options_.correction != ZenFlowOptions::Correction::none)
    correction_ = torch::zeros({int64_t(groups_.size() + 1)}, torch::kFloat64);
  if (auto_topk_) topk_ = torch::zeros({1}, torch::kFloat64);
}

void ZenFlow::note(const char *event) {
  if (!events_.empty()) events_ += ",";
  events_ += event;
}

void ZenFlow::begin(const StepTensors &step) {
  events_.clear();
  step_ = step;
  if (!active(step.step)) return warm_up_.begin(step);
  if (!host_.job_pending()) host_.drain();  // a warm-up step's update (a CPU update goes on across steps)
}

void ZenFlow::gradients_final(uint64_t begin, uint64_t end, void *stream) {
  if (!active(step_.step)) warm_up_.gradients_final(begin, end, stream);
}

void ZenFlow::finish(float mean_scale, float clip, bool) {
  if (active(step_.step)) return step(step_.step, mean_scale, clip);
  note("cpu");  // a warm-up step: plain synchronous offload
  warm_up_.finish(mean_scale, clip, /*defer=*/false);
}

void ZenFlow::step(int64_t step, float mean_scale, float clip) {
  Timers &timers = buffers_.runtime.timers;
  void *stream = buffers_.runtime.compute_stream;
  uint32_t update = timers.id("selective_optimizer_update");
  timers.start(update, stream);
  mean_scale_ = mean_scale;
  if (options_.staggered) staggered_step(step, clip);
  else deepspeed_step(step, clip);
  timers.stop(update, stream);
}

void ZenFlow::deepspeed_step(int64_t step, float clip) {
  if (!selected_ || (summed_steps_ == 0 && reselect_due(step))) select(step);
  update_selected(step, mean_scale_ * clip);
  if (whole()) return;  // the CPU has nothing to update
  accumulate(clip);
  if (boundary()) start_host_update();
}

// The selected columns and 1-D parameters: one optimizer step over their compact copy, the result
// written into the working parameters.
void ZenFlow::update_selected(int64_t step, float scale) {
  if (selection_.device_numel == 0) return;
  Timers &timers = buffers_.runtime.timers;
  void *stream = buffers_.runtime.compute_stream;
  torch::NoGradGuard no_grad;
  uint32_t process = timers.id("selective_optimizer_process"), optimizer = timers.id("selective_optimizer_step");
  timers.start(process, stream);
  torch::Tensor grads = whole() ? step_.grads : step_.grads.index_select(0, index_);
  timers.stop(process, stream);

  timers.start(optimizer, stream);
  zf_optimizer_step_args args =
      optimizer_step_args(compact_ranges_.data(), compact_ranges_.size(), buffers_.groups.data(), buffers_.groups.size(),
                          step, scale, view_of(master_), view_of(grads));
  args.stream = stream;
  const bool compute_precision = buffers_.dtype != torch::kFloat32;
  if (compute_precision) args.params_out = view_of(whole() ? step_.params : params_out_);
  optimizer_.step(args);
  if (!whole()) step_.params.index_copy_(0, index_, compute_precision ? params_out_ : master_);
  else if (!compute_precision) step_.params.copy_(master_);
  timers.stop(optimizer, stream);
  note("gpu");
}

// The step's gradients join the sum of the interval (scaled by the step's clipping factor).
void ZenFlow::accumulate(float clip) {
  Timers &timers = buffers_.runtime.timers;
  void *stream = buffers_.runtime.compute_stream;
  uint32_t process = timers.id("selective_optimizer_process");
  timers.start(process, stream);
  if (sum_copied_pending_) wait_event(stream, host_.job_copies_done());  // the last sum has gone down
  sum_copied_pending_ = false;
  torch::NoGradGuard no_grad;
  const torch::Tensor &grads = step_.grads;
  if (summed_steps_ == 0) {
    if (clip == 1.0f) sum_.copy_(grads);
    else sum_.copy_(grads.mul(clip));
  } else {
    sum_.add_(grads, clip);
  }
  ++summed_steps_;
  timers.stop(process, stream);
}

bool ZenFlow::boundary() {
  if (options_.update_interval > 0) return summed_steps_ >= options_.update_interval;
  if (summed_steps_ >= kMaxAutoInterval) return true;
  return auto_update_due(layout_, selection_.mask, scores(step_.grads), scores(sum_), options_.auto_ratio);
}

// The interval's sum goes down once; the CPU optimizer updates the other columns on the update
// thread and uploads them into the staging buffer, swapped in at the next boundary (or now).
void ZenFlow::start_host_update() {
  if (swap_due_) swap_in();
  HostJob job;
  job.ranges = selection_.host;
  job.begin = 0;
  job.end = buffers_.numel();
  job.step = ++host_updates_;
  hand_over(std::move(job), summed_steps_);
  summed_steps_ = 0;
  swap_due_ = true;
  if (!options_.overlap) swap_in();
}

// The CPU update's result replaces the working parameters, but for the device's columns.
void ZenFlow::swap_in() {
  Timers &timers = buffers_.runtime.timers;
  uint32_t sync = timers.id("selective_optimizer_sync");
  timers.start(sync);  // host time: the wait for the CPU update, and queueing the swap
  host_.drain();
  // The next CPU update writes the host buffers these uploads read (they landed long ago with
  // overlap; just now without).
  synchronize_event(host_.transfers_done(ZF_TRANSFER_PARAMETERS_IN));
  torch::NoGradGuard no_grad;
  torch::Tensor &params = step_.params;
  if (selection_.device_numel) staging_.index_copy_(0, index_, params.index_select(0, index_));
  params.copy_(staging_);
  timers.stop(sync);
  swap_due_ = false;
  note("swap");
}

// The selector's scores of `grads` (this rank's shard), summed over ranks, on the host.
std::vector<float> ZenFlow::scores(const torch::Tensor &grads) {
  torch::Tensor scores = torch::zeros({int64_t(columns_)}, grads.options().dtype(torch::kFloat32));
  buffers_.plugins.selector.score(select_args(grads), view_of(scores));
  buffers_.runtime.comm->all_reduce(view_of(scores), ZF_REDUCE_SUM, buffers_.runtime.compute_stream);
  torch::Tensor host = scores.to(torch::kCPU);
  return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + columns_);
}

zf_select_args ZenFlow::select_args(const torch::Tensor &grads) const {
  zf_select_args args{};
  args.struct_size = sizeof args;
  args.column_count = columns_;
  args.layout = &layout_;
  args.grads = view_of(grads);
  args.grad_offset = buffers_.shard_begin;
  args.stream = buffers_.runtime.compute_stream;
  args.topk_ratio = options_.topk_ratio;
  return args;
}

// Chooses the columns from this step's gradients. What the device held goes back to the host
// first, with the CPU update in flight applied, so that the host master is whole.
void ZenFlow::select(int64_t step) {
  if (options_.topk_ratio == 0 || selections_ == 0) choose_topk();
  if (swap_due_) swap_in();
  if (selected_) store_device_columns();
  std::vector<float> scored = scores(step_.grads);
  std::vector<uint8_t> mask(columns_, 0);
  buffers_.plugins.selector.select(select_args(step_.grads),
                                 zf_tensor_view{scored.data(), columns_, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                                 zf_tensor_view{mask.data(), columns_, ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0});
  if (!table_rows_) select_whole_tables(layout_, mask);
  keep_leaving_columns();
  use_selection(make_selection(layout_, buffers_.shard_begin, buffers_.shard_end, std::move(mask)));
  last_selection_ = step;
  ++selections_;
  note("select");
}

// Builds the compact copy of the device's columns from the host master and state: a column that
// comes to the device brings the moments the CPU kept for it (one moment chain per element).
void ZenFlow::use_selection(Selection selection) {
  selection_ = std::move(selection);
  selected_ = true;
  MemoryLedger &ledger = buffers_.runtime.memory;
  const zf_tier tier = buffers_.model_tier;
  const int64_t count = int64_t(selection_.device_numel);
  master_ = params_out_ = index_ = torch::Tensor();
  state_.clear();
  compact_ranges_.clear();
  uint64_t position = 0;
  for (const zf_optimizer_range &r : selection_.device) {
    append_range(compact_ranges_, position, position + (r.end - r.begin), r.group);
    position += r.end - r.begin;
  }
  // Each group's selected columns are a slice of the compact tensors (both are in shard order).
  for (Group &g : groups_) {
    g.compact_begin = compact_position(g.begin);
    g.compact_end = compact_position(g.end);
  }
  if (count == 0) return;
  torch::NoGradGuard no_grad;
  if (!whole()) {  // the whole shard needs no index: the compact tensors are the shard
    index_ = ledger_tensor(ledger, tier, uint64_t(count), torch::kLong, "zenflow.index", /*zero=*/false);
    fill_index(index_, selection_.device);
  }
  master_ = ledger_tensor(ledger, tier, uint64_t(count), torch::kFloat32, "zenflow.master", /*zero=*/false);
  master_.copy_(host_gather(buffers_.master));
  if (buffers_.dtype != torch::kFloat32 && !whole()) {
    // What the device's update writes there, until its first: a group swapped in before it (the
    // first step of a resumed run) takes the device's columns from here.
    params_out_ = ledger_tensor(ledger, tier, uint64_t(count), buffers_.dtype, "zenflow.params_out", /*zero=*/false);
    params_out_.copy_(master_);
  }
  std::vector<zf_tensor_view> views;
  for (const StateSpec &spec : state_specs_) {
    state_.push_back(ledger_tensor(ledger, tier, uint64_t(count), spec.dtype, "zenflow." + spec.name,
                                   /*zero=*/false));
    views.push_back(view_of(state_.back()));
  }
  optimizer_.bind_state(uint64_t(count), views);
  for (size_t i = 0; i < state_.size(); ++i) state_[i].copy_(gather_state(i));
}

}  // namespace zf
