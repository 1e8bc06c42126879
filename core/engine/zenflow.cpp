#include "engine/zenflow.hpp"

#include "config/limits.hpp"
#include "engine/disk_state.hpp"
#include "engine/flat_buffers.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "plugin/plugin_entry.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace zf {

namespace {

// "auto" -> 0, else an integer >= 1.
int64_t interval(const RunConfig &config, const char *key) {
  std::string text = config.string("zenflow", key);
  if (text == "auto") return 0;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && value >= 1 && value <= kMaxSteps,
             "%s: zenflow.%s = \"%s\": expected an integer >= 1 or \"auto\"",
             config.where("zenflow", key).str().c_str(), key, text.c_str());
  return value;
}

// "auto": the CPU update moves a column as far as the update_interval steps it stands for when
// fine-tuning (measured: closer to AdamW), and one step's worth from scratch (where the larger step
// trains worse); else a number > 0.
double read_cpu_lr_scale(const RunConfig &config, const ZenFlowOptions &o) {
  std::string text = config.string("zenflow", "cpu_lr_scale");
  if (text == "auto")
    return o.staggered && o.update_interval > 0 && !config.string("model", "init_from").empty()
               ? double(o.update_interval)
               : 1.0;
  char *end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  ZF_REQUIRE(!text.empty() && *end == '\0' && errno == 0 && std::isfinite(value) && value > 0 && value <= 1e6,
             "%s: zenflow.cpu_lr_scale = \"%s\": expected a number > 0 or \"auto\"",
             config.where("zenflow", "cpu_lr_scale").str().c_str(), text.c_str());
  return value;
}

}  // namespace

ZenFlowOptions ZenFlowOptions::read(const RunConfig &config, int64_t steps_per_epoch) {
  ZenFlowOptions o;
  o.enabled = config.has_table("zenflow");
  if (!o.enabled) return o;
  o.topk_ratio = config.real("zenflow", "topk_ratio");
  o.update_interval = interval(config, "update_interval");
  o.overlap = config.boolean("zenflow", "overlap_step");
  o.staggered = config.string("zenflow", "schedule") == "staggered";
  ZF_REQUIRE(!o.staggered || o.update_interval != 0,
             "%s: zenflow.update_interval = \"auto\" ends an interval when the other columns' gradients outweigh the "
             "selected ones (zen-auto), which needs zenflow.schedule = \"deepspeed\"; the staggered schedule "
             "takes an integer", config.where("zenflow", "update_interval").str().c_str());
  o.cpu_lr_scale = read_cpu_lr_scale(config, o);
  o.warm_up = config.integer("zenflow", "full_warm_up_rounds");
  o.auto_ratio = config.real("zenflow", "auto_ratio");
  const int64_t select = interval(config, "select_interval"), epoch = std::max<int64_t>(1, steps_per_epoch);
  const std::string strategy = config.string("zenflow", "select_strategy");
  ZF_REQUIRE(strategy != "auto" || select == 0,
             "%s: zenflow.select_interval = %lld needs select_strategy = \"step\" or \"epoch\" (\"auto\" chooses the "
             "columns again every epoch)", config.where("zenflow", "select_interval").str().c_str(), (long long)select);
  ZF_REQUIRE(o.staggered || strategy != "step" || select == 0 || o.update_interval == 0 || select >= o.update_interval,
             "%s: zenflow.select_interval = %lld steps is shorter than update_interval = %lld: columns are chosen "
             "again only at the start of an interval; use select_interval >= update_interval",
             config.where("zenflow", "select_interval").str().c_str(), (long long)select,
             (long long)o.update_interval);
  o.select_interval = strategy == "step" && select ? select : (select ? select : 1) * epoch;
  ZF_REQUIRE(!config.boolean("zenflow", "offload_selected_state"),
             "%s: zenflow.offload_selected_state = true is not supported yet: the selected columns' master and "
             "moments stay on the GPU (about topk_ratio x 12 bytes per parameter); remove the key",
             config.where("zenflow", "offload_selected_state").str().c_str());
  ZF_REQUIRE(config.boolean("model", "column_major"),
             "%s: model.column_major = false, but ZenFlow updates whole gradient columns, which must be contiguous: "
             "remove model.column_major", config.where("model", "column_major").str().c_str());
  return o;
}

uint32_t column_count(const zf_layout &layout) {
  uint64_t columns = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i)
    if (layout.segments[i].flags & ZF_SEGMENT_MATRIX) columns += layout.segments[i].cols;
  return uint32_t(columns);
}

Selection make_selection(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end, std::vector<uint8_t> mask) {
  Selection s;
  s.mask = std::move(mask);
  auto to_device = [&](uint64_t lo, uint64_t hi, uint32_t group) {
    lo = std::max(lo, shard_begin);
    hi = std::min(hi, shard_end);
    if (lo >= hi) return;
    s.device_numel += hi - lo;
    append_range(s.device, lo - shard_begin, hi - shard_begin, group);
  };
  auto to_host = [&](uint64_t lo, uint64_t hi, uint32_t group) {
    lo = std::max(lo, shard_begin);
    hi = std::min(hi, shard_end);
    if (lo < hi) append_range(s.host, lo - shard_begin, hi - shard_begin, group);
  };
  uint64_t column = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    // As optimizer_ranges: the first segment takes the shard's leading elements, padding after a
    // segment belongs to it, and the last runs to the shard's end.
    uint64_t lo = i == 0 ? 0 : seg.offset;
    uint64_t hi = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : std::max(shard_end, seg.offset + seg.numel);
    uint32_t group = (seg.flags & ZF_SEGMENT_NO_DECAY) ? 1 : 0;
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) {
      to_device(lo, hi, group);
      continue;
    }
    to_host(lo, seg.offset, group);
    uint64_t first = seg.offset >= shard_begin ? 0 : (shard_begin - seg.offset) / seg.rows;
    for (uint64_t c = first; c < seg.cols; ++c) {
      uint64_t begin = seg.offset + c * seg.rows;
      if (begin >= shard_end) break;
      if (s.mask[column + c]) to_device(begin, begin + seg.rows, group);
      else to_host(begin, begin + seg.rows, group);
    }
    to_host(seg.offset + seg.numel, hi, group);
    column += seg.cols;
  }
  return s;
}

bool auto_update_due(const zf_layout &layout, const std::vector<uint8_t> &mask, const std::vector<float> &step_scores,
                     const std::vector<float> &accumulated_scores, double auto_ratio) {
  uint64_t column = 0, weights = 0, heavier = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &seg = layout.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    double selected = 0, other = 0;
    bool any_selected = false, any_other = false;
    for (uint64_t c = column; c < column + seg.cols; ++c) {
      if (mask[c]) {
        selected += step_scores[c];
        any_selected = true;
      } else {
        other += accumulated_scores[c];
        any_other = true;
      }
    }
    column += seg.cols;
    if (!any_selected || !any_other) continue;
    ++weights;
    if (other > selected) ++heavier;
  }
  return weights == 0 || double(heavier) >= auto_ratio * double(weights);
}

ZenFlow::ZenFlow(UpdatePlan &plan, const zf_layout &layout, const ZenFlowOptions &options)
    : plan_(plan), layout_(layout), options_(options), columns_(column_count(layout)),
      optimizer_(plan.plugins_.selective_optimizer) {
  auto &offload = *plan_.plugins_.offload.instance;
  auto &host_optimizer = *plan_.plugins_.optimizer.instance;
  ZF_REQUIRE(plan_.offloaded_ && on_host(plan_.tiers_.master_tier),
             "[zenflow] updates the unselected columns on the CPU, so it needs an offload plugin that keeps the master "
             "weights in host memory (offload.plugin = \"cpu_optimizer\"), not '%s'", offload.name());
  ZF_REQUIRE(!plan_.state_specs_.empty(),
             "[zenflow] moves each column's optimizer state between the CPU and the device, so the host must hold it: "
             "optimizer plugin '%s' keeps its own (use optimizer.plugin = \"cpu_adam\")", host_optimizer.name());
  ZF_REQUIRE(optimizer_.instance != nullptr, "internal: [zenflow] without a device optimizer");
  state_specs_ = host_held_state(*optimizer_.instance);
  ZF_REQUIRE(!state_specs_.empty(),
             "[zenflow]: optimizer plugin '%s' (the selected columns' update) cannot use host-held state",
             optimizer_.instance->name());
  for (const StateSpec &spec : state_specs_) {
    auto found = std::find_if(plan_.state_specs_.begin(), plan_.state_specs_.end(),
                              [&](const StateSpec &host) { return host.name == spec.name; });
    ZF_REQUIRE(found != plan_.state_specs_.end(),
               "[zenflow] moves each column's optimizer state between '%s' on the CPU and '%s' on the device, but "
               "'%s' has no state '%s': use optimizer.plugin = \"cpu_adam\"",
               host_optimizer.name(), optimizer_.instance->name(), host_optimizer.name(), spec.name.c_str());
    host_state_of_.push_back(int(found - plan_.state_specs_.begin()));
  }
  ZF_REQUIRE(plan_.dtype_ == torch::kFloat32 ||
                 (optimizer_.file().descriptor->capabilities & ZF_CAP_LOW_PRECISION_OUT),
             "[zenflow]: optimizer plugin '%s' cannot write %s parameters", optimizer_.instance->name(),
             c10::toString(plan_.dtype_));
  if (options_.staggered) {
    // U groups of about equal size, of whole buckets (on disk a bucket is a tile) when there are
    // enough of them: the same groups whatever the tier, for the same bucket size.
    const uint64_t numel = plan_.shard_end_ - plan_.shard_begin_, count = uint64_t(options_.update_interval);
    const uint64_t bucket = plan_.tiers_.bucket_numel, grid = bucket > 0 && bucket * count <= numel ? bucket : 1;
    groups_.resize(count);
    for (uint64_t k = 0; k < count; ++k) {
      groups_[k].begin = k == 0 ? 0 : groups_[k - 1].end;
      groups_[k].end = k + 1 == count ? numel : std::max(groups_[k].begin, numel * (k + 1) / count / grid * grid);
    }
    group_counters_ = torch::zeros({int64_t(2 * count + 2)}, torch::kLong);
  }
}

ZenFlow::~ZenFlow() = default;

void ZenFlow::add_planned(std::vector<PlannedBuffer> &planned) const {
  const uint64_t numel = plan_.shard_end_ - plan_.shard_begin_, element = c10::elementSize(plan_.dtype_);
  const zf_tier tier = plan_.model_tier_;
  planned.push_back({tier, "zenflow.gradient_sum", numel * element});
  planned.push_back({tier, "zenflow.staging", numel * element});
  uint64_t matrix = 0;
  for (uint32_t i = 0; i < layout_.segment_count; ++i) {
    const zf_segment &seg = layout_.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    uint64_t lo = std::max(seg.offset, plan_.shard_begin_), hi = std::min(seg.offset + seg.numel, plan_.shard_end_);
    if (lo < hi) matrix += hi - lo;
  }
  uint64_t selected = uint64_t(std::ceil(options_.topk_ratio * double(matrix))) + (numel - matrix);
  uint64_t per_element = 4 + 8 /* index */ + (plan_.dtype_ == torch::kFloat32 ? 0 : element);
  for (const StateSpec &spec : state_specs_) per_element += c10::elementSize(spec.dtype);
  planned.push_back({tier, "zenflow.selected (estimated)", selected * per_element});
}

void ZenFlow::allocate() {
  const uint64_t numel = plan_.shard_end_ - plan_.shard_begin_;
  MemoryLedger &ledger = plan_.runtime_.memory;
  sum_ = ledger_tensor(ledger, plan_.model_tier_, numel, plan_.dtype_, "zenflow.gradient_sum");
  staging_ = ledger_tensor(ledger, plan_.model_tier_, numel, plan_.dtype_, "zenflow.staging");
  counters_ = torch::zeros({6}, torch::kLong);
}

void ZenFlow::note(const char *event) {
  if (!events_.empty()) events_ += ",";
  events_ += event;
}

void ZenFlow::step(int64_t step, float mean_scale, float clip) {
  Timers &timers = plan_.runtime_.timers;
  void *stream = plan_.runtime_.compute_stream;
  uint32_t update = timers.id("selective_optimizer_update");
  timers.start(update, stream);
  mean_scale_ = mean_scale;
  if (options_.staggered) staggered_step(step, clip);
  else deepspeed_step(step, clip);
  timers.stop(update, stream);
}

void ZenFlow::deepspeed_step(int64_t step, float clip) {
  if (!selected_ || (summed_steps_ == 0 && step - last_selection_ >= options_.select_interval)) select(step);
  update_selected(step, mean_scale_ * clip);
  accumulate(clip);
  if (boundary()) start_host_update();
}

// The selected columns and 1-D parameters: one optimizer step over their compact copy, the result
// written into the working parameters.
void ZenFlow::update_selected(int64_t step, float scale) {
  if (selection_.device_numel == 0) return;
  Timers &timers = plan_.runtime_.timers;
  void *stream = plan_.runtime_.compute_stream;
  torch::NoGradGuard no_grad;
  uint32_t process = timers.id("selective_optimizer_process"), optimizer = timers.id("selective_optimizer_step");
  timers.start(process, stream);
  torch::Tensor grads = plan_.grads_shard_.index_select(0, index_);
  timers.stop(process, stream);

  timers.start(optimizer, stream);
  auto &instance = *optimizer_.instance;
  zf_optimizer_step_args args =
      optimizer_step_args(compact_ranges_.data(), compact_ranges_.size(), plan_.groups_.data(), plan_.groups_.size(),
                          step, scale, view_of(master_), view_of(grads));
  args.stream = stream;
  if (params_out_.defined()) args.params_out = view_of(params_out_);
  {
    zf_error error{};
    const PluginEntry running(instance, "step");
    instance.check(instance.api<zf_optimizer_api>()->step(instance.object(), &args, &error), error, "step");
  }
  plan_.params_shard_.index_copy_(0, index_, params_out_.defined() ? params_out_ : master_);
  timers.stop(optimizer, stream);
  note("gpu");
}

// The step's gradients join the sum of the interval (scaled by the step's clipping factor).
void ZenFlow::accumulate(float clip) {
  Timers &timers = plan_.runtime_.timers;
  void *stream = plan_.runtime_.compute_stream;
  uint32_t process = timers.id("selective_optimizer_process");
  timers.start(process, stream);
  if (sum_copied_pending_) wait_event(stream, plan_.job_copies_done());  // the last sum has gone down
  sum_copied_pending_ = false;
  torch::NoGradGuard no_grad;
  const torch::Tensor &grads = plan_.grads_shard_;
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
  return auto_update_due(layout_, selection_.mask, scores(plan_.grads_shard_), scores(sum_), options_.auto_ratio);
}

// The interval's sum goes down once; the CPU optimizer updates the other columns on the update
// thread and uploads them into the staging buffer, swapped in at the next boundary (or now).
void ZenFlow::start_host_update() {
  if (swap_due_) swap_in();
  HostJob job;
  job.ranges = selection_.host;
  job.begin = 0;
  job.end = plan_.shard_end_ - plan_.shard_begin_;
  job.step = next_host_step();
  hand_over(std::move(job), summed_steps_);
  summed_steps_ = 0;
  swap_due_ = true;
  if (!options_.overlap) swap_in();
}

// The CPU update's result replaces the working parameters, but for the device's columns.
void ZenFlow::swap_in() {
  Timers &timers = plan_.runtime_.timers;
  uint32_t sync = timers.id("selective_optimizer_sync");
  timers.start(sync);  // host time: the wait for the CPU update, and queueing the swap
  plan_.drain();
  // The next CPU update writes the host buffers these uploads read (they landed long ago with
  // overlap; just now without).
  synchronize_event(plan_.transfers_done(ZF_TRANSFER_PARAMETERS_IN));
  torch::NoGradGuard no_grad;
  torch::Tensor &params = plan_.params_shard_;
  if (selection_.device_numel) staging_.index_copy_(0, index_, params.index_select(0, index_));
  params.copy_(staging_);
  timers.stop(sync);
  swap_due_ = false;
  note("swap");
}

// The selector's scores of `grads` (this rank's shard), summed over ranks, on the host.
std::vector<float> ZenFlow::scores(const torch::Tensor &grads) {
  auto &selector = *plan_.plugins_.selector.instance;
  const auto *api = selector.api<zf_selector_api>();
  torch::Tensor scores = torch::zeros({int64_t(columns_)}, grads.options().dtype(torch::kFloat32));
  zf_select_args args = select_args(grads);
  zf_error error{};
  if (api->score) {
    const PluginEntry running(selector, "score");
    selector.check(api->score(selector.object(), &args, view_of(scores), &error), error, "score");
  }
  plan_.runtime_.comm->all_reduce(view_of(scores), ZF_REDUCE_SUM, plan_.runtime_.compute_stream);
  torch::Tensor host = scores.to(torch::kCPU);
  return std::vector<float>(host.data_ptr<float>(), host.data_ptr<float>() + columns_);
}

zf_select_args ZenFlow::select_args(const torch::Tensor &grads) const {
  zf_select_args args{};
  args.struct_size = sizeof args;
  args.column_count = columns_;
  args.layout = &layout_;
  args.grads = view_of(grads);
  args.grad_offset = plan_.shard_begin_;
  args.stream = plan_.runtime_.compute_stream;
  args.topk_ratio = options_.topk_ratio;
  return args;
}

// Chooses the columns from this step's gradients. What the device held goes back to the host
// first, with the CPU update in flight applied, so that the host master is whole.
void ZenFlow::select(int64_t step) {
  if (swap_due_) swap_in();
  if (selected_) store_device_columns();
  std::vector<float> scored = scores(plan_.grads_shard_);
  std::vector<uint8_t> mask(columns_, 0);
  auto &selector = *plan_.plugins_.selector.instance;
  zf_select_args args = select_args(plan_.grads_shard_);
  zf_error error{};
  const PluginEntry running(selector, "select");
  selector.check(selector.api<zf_selector_api>()->select(
                     selector.object(), &args, zf_tensor_view{scored.data(), columns_, ZF_DTYPE_F32, ZF_DEVICE_CPU, 0, 0},
                     zf_tensor_view{mask.data(), columns_, ZF_DTYPE_U8, ZF_DEVICE_CPU, 0, 0}, &error),
                 error, "select");
  use_selection(make_selection(layout_, plan_.shard_begin_, plan_.shard_end_, std::move(mask)));
  last_selection_ = step;
  ++selections_;
  note("select");
}

// Builds the compact copy of the device's columns from the host master and state: a column that
// comes to the device brings the moments the CPU kept for it (one moment chain per element).
void ZenFlow::use_selection(Selection selection) {
  selection_ = std::move(selection);
  selected_ = true;
  MemoryLedger &ledger = plan_.runtime_.memory;
  const zf_tier tier = plan_.model_tier_;
  const int64_t count = int64_t(selection_.device_numel);
  master_ = params_out_ = index_ = torch::Tensor();
  state_.clear();
  compact_ranges_.clear();
  std::vector<int64_t> starts, lengths;
  uint64_t position = 0;
  for (const zf_optimizer_range &r : selection_.device) {
    starts.push_back(int64_t(r.begin));
    lengths.push_back(int64_t(r.end - r.begin));
    append_range(compact_ranges_, position, position + (r.end - r.begin), r.group);
    position += r.end - r.begin;
  }
  // Each group's selected columns are a slice of the compact tensors (both are in shard order).
  auto compact_position = [&](uint64_t element) {
    uint64_t at = 0;
    for (const zf_optimizer_range &r : selection_.device) {
      if (r.begin >= element) break;
      at += std::min(r.end, element) - r.begin;
    }
    return int64_t(at);
  };
  for (Group &g : groups_) {
    g.compact_begin = compact_position(g.begin);
    g.compact_end = compact_position(g.end);
  }
  if (count == 0) return;
  torch::NoGradGuard no_grad;
  torch::Device device = sum_.device();
  torch::Tensor start = torch::tensor(starts).to(device), length = torch::tensor(lengths).to(device);
  index_ = ledger_tensor(ledger, tier, uint64_t(count), torch::kLong, "zenflow.index", /*zero=*/false);
  index_.copy_(torch::arange(count, start.options()) + torch::repeat_interleave(start - (length.cumsum(0) - length), length));

  master_ = ledger_tensor(ledger, tier, uint64_t(count), torch::kFloat32, "zenflow.master", /*zero=*/false);
  master_.copy_(host_gather(plan_.master));
  if (plan_.dtype_ != torch::kFloat32)
    params_out_ = ledger_tensor(ledger, tier, uint64_t(count), plan_.dtype_, "zenflow.params_out", /*zero=*/false);
  std::vector<zf_tensor_view> views;
  for (const StateSpec &spec : state_specs_) {
    state_.push_back(ledger_tensor(ledger, tier, uint64_t(count), spec.dtype, "zenflow." + spec.name,
                                   /*zero=*/false));
    views.push_back(view_of(state_.back()));
  }
  auto &instance = *optimizer_.instance;
  {
    zf_error error{};
    const PluginEntry running(instance, "bind_state");
    instance.check(instance.api<zf_optimizer_api>()->bind_state(instance.object(), uint64_t(count), views.data(),
                                                                uint32_t(views.size()), &error),
                   error, "bind_state");
  }
  for (size_t i = 0; i < state_.size(); ++i) state_[i].copy_(gather_state(i));
}

// The device's columns of host state tensor i (in memory or on disk), compacted, on the host.
torch::Tensor ZenFlow::gather_state(size_t i) const {
  const size_t host = size_t(host_state_of_[i]);
  if (!plan_.disk_) return host_gather(plan_.state_[host]);
  torch::Tensor compact = torch::empty({int64_t(selection_.device_numel)}, plan_.state_[host].options());
  plan_.disk_->copy_ranges(host, selection_.device, compact.data_ptr(), /*to_disk=*/false);
  return compact;
}

// The inverse: the device's compact state tensor i into the host's (in memory or on disk).
void ZenFlow::scatter_state(size_t i) {
  const size_t host = size_t(host_state_of_[i]);
  if (!plan_.disk_) return host_scatter(state_[i], plan_.state_[host]);
  torch::Tensor values = state_[i].to(torch::kCPU).to(plan_.state_[host].scalar_type()).contiguous();
  plan_.disk_->copy_ranges(host, selection_.device, values.data_ptr(), /*to_disk=*/true);
}

// The device's columns of `source` (a host tensor of the shard), compacted, on the host.
torch::Tensor ZenFlow::host_gather(const torch::Tensor &source) const {
  torch::Tensor compact = torch::empty({int64_t(selection_.device_numel)}, source.options());
  const size_t element = source.element_size();
  const char *from = static_cast<const char *>(source.data_ptr());
  char *to = static_cast<char *>(compact.data_ptr());
  for (const zf_optimizer_range &r : selection_.device) {
    std::memcpy(to, from + r.begin * element, (r.end - r.begin) * element);
    to += (r.end - r.begin) * element;
  }
  return compact;
}

// The inverse: the compact values (any device and dtype) into the device's columns of `destination`.
void ZenFlow::host_scatter(const torch::Tensor &compact, torch::Tensor &destination) const {
  torch::Tensor values = compact.to(torch::kCPU).to(destination.scalar_type());
  const size_t element = destination.element_size();
  const char *from = static_cast<const char *>(values.data_ptr());
  char *to = static_cast<char *>(destination.data_ptr());
  for (const zf_optimizer_range &r : selection_.device) {
    std::memcpy(to + r.begin * element, from, (r.end - r.begin) * element);
    from += (r.end - r.begin) * element;
  }
}

// The device's master and moments of the selected columns into the host's.
void ZenFlow::store_device_columns() {
  if (selection_.device_numel == 0) return;
  host_scatter(master_, plan_.master);
  for (size_t i = 0; i < state_.size(); ++i) scatter_state(i);
}

void ZenFlow::complete() {
  if (options_.staggered && selected_) {
    if (swap_group_ >= 0) swap_in_group();
    flush_groups();  // the last, partial sums
  }
  if (summed_steps_ > 0 && selected_) start_host_update();  // the last, partial interval
  if (swap_due_) swap_in();
  if (selected_) store_device_columns();
}

std::vector<std::pair<std::string, torch::Tensor>> ZenFlow::state() {
  if (selected_) store_device_columns();
  int64_t *c = counters_.data_ptr<int64_t>();
  c[0] = summed_steps_;
  c[1] = host_updates_;
  c[2] = selections_;
  c[3] = last_selection_;
  c[4] = swap_due_ ? 1 : 0;
  c[5] = selected_ ? 1 : 0;
  if (!mask_.defined()) mask_ = torch::zeros({int64_t(columns_)}, torch::kUInt8);
  if (selected_) std::memcpy(mask_.data_ptr(), selection_.mask.data(), columns_);
  saved_params_ = plan_.params_shard_.defined() ? plan_.params_shard_
                                                : torch::empty({int64_t(plan_.shard_end_ - plan_.shard_begin_)},
                                                               sum_.options());
  std::vector<std::pair<std::string, torch::Tensor>> out = {{"zenflow.params", saved_params_},
                                                            {"zenflow.gradient_sum", sum_},
                                                            {"zenflow.staging", staging_},
                                                            {"zenflow.mask", mask_},
                                                            {"zenflow.counters", counters_}};
  if (options_.staggered) {
    int64_t *g = group_counters_.data_ptr<int64_t>();
    const size_t count = groups_.size();
    for (size_t i = 0; i < count; ++i) {
      g[i] = groups_[i].summed;
      g[count + i] = groups_[i].updates;
    }
    g[2 * count] = next_group_;
    g[2 * count + 1] = swap_group_;
    out.emplace_back("zenflow.groups", group_counters_);
  }
  return out;
}

void ZenFlow::restore(const torch::Tensor &params_shard) {
  const int64_t *c = counters_.data_ptr<int64_t>();
  summed_steps_ = c[0];
  host_updates_ = c[1];
  selections_ = c[2];
  last_selection_ = c[3];
  swap_due_ = c[4] != 0;
  if (options_.staggered) {
    const int64_t *g = group_counters_.data_ptr<int64_t>();
    const size_t count = groups_.size();
    for (size_t i = 0; i < count; ++i) {
      groups_[i].summed = g[i];
      groups_[i].updates = g[count + i];
    }
    next_group_ = g[2 * count];
    swap_group_ = g[2 * count + 1];
  }
  if (c[5]) {
    std::vector<uint8_t> mask(mask_.data_ptr<uint8_t>(), mask_.data_ptr<uint8_t>() + columns_);
    use_selection(make_selection(layout_, plan_.shard_begin_, plan_.shard_end_, mask));
  }
  torch::NoGradGuard no_grad;
  params_shard.copy_(saved_params_);
  saved_params_ = torch::Tensor();
}

std::vector<std::pair<std::string, double>> ZenFlow::facts() const {
  return {{"zenflow_cpu_updates", double(host_updates_)}, {"zenflow_selections", double(selections_)},
          {"zenflow_cpu_lr_scale", options_.cpu_lr_scale}};
}

double ZenFlow::selected_fraction() const {
  if (!selected_ || columns_ == 0) return 0;
  return double(std::count(selection_.mask.begin(), selection_.mask.end(), uint8_t(1))) / double(columns_);
}

}  // namespace zf
