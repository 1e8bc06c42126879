// zenflow_state.cpp: the selected columns' master and state between the host's tensors (in
// memory or on disk) and the device's compact copies, the end of the run, and ZenFlow's checkpoints.
#include "update/zenflow.hpp"

#include "update/disk_state.hpp"
#include "runtime/tensors.hpp"

#include <algorithm>
#include <cstring>

namespace zf {

// The device's columns of host state tensor i (in memory or on disk), compacted, on the host.
torch::Tensor ZenFlow::gather_state(size_t i) const {
  const size_t host = host_state_of_[i];
  if (!buffers_.disk) return host_gather(buffers_.state[host]);
  torch::Tensor compact = torch::empty({int64_t(selection_.device_numel)}, buffers_.state[host].options());
  buffers_.disk->copy_ranges(host, selection_.device, compact.data_ptr(), /*to_disk=*/false);
  return compact;
}

// The inverse: the device's compact state tensor i into the host's (in memory or on disk).
void ZenFlow::scatter_state(size_t i) {
  const size_t host = host_state_of_[i];
  if (!buffers_.disk) return host_scatter(state_[i], buffers_.state[host]);
  torch::Tensor values = state_[i].to(torch::kCPU).to(buffers_.state[host].scalar_type()).contiguous();
  buffers_.disk->copy_ranges(host, selection_.device, values.data_ptr(), /*to_disk=*/true);
}

// The device's columns, when they are one span of the shard (every column: topk_ratio 1, or auto's
// choice of 1), whatever their weight-decay groups; else an empty tensor.
torch::Tensor ZenFlow::device_span(const torch::Tensor &shard) const {
  const std::vector<zf_optimizer_range> &ranges = selection_.device;
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].begin != ranges[i - 1].end) return torch::Tensor();
  if (ranges.empty()) return torch::Tensor();
  return shard.narrow(0, int64_t(ranges.front().begin), int64_t(ranges.back().end - ranges.front().begin));
}

// The device's columns of `source` (a host tensor of the shard), compacted, on the host. One span
// is a view: its copy to the GPU then reads the (pinned) host buffer once, with no gathered copy
// of it first (at 85M parameters the gather took 0.8 s of the first step on an H200).
torch::Tensor ZenFlow::host_gather(const torch::Tensor &source) const {
  if (torch::Tensor span = device_span(source); span.defined()) return span;
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
  if (torch::Tensor span = device_span(destination); span.defined()) return void(span.copy_(compact));
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
  host_scatter(master_, buffers_.master);
  for (size_t i = 0; i < state_.size(); ++i) scatter_state(i);
}

// After the last step: every gradient still owed applied, the device's columns in the host master.
void ZenFlow::complete() {
  settling_ = true;  // the model the run ends with is the master, not a look-ahead from it
  host_.drain();
  if (options_.staggered && selected_) {
    if (swap_group_ >= 0) swap_in_group();
    flush_groups();  // the last, partial sums
  }
  if (summed_steps_ > 0 && selected_) start_host_update();  // the last, partial interval
  if (swap_due_) swap_in();
  if (selected_) store_device_columns();
  settle_lookahead();
}

std::vector<std::pair<std::string, torch::Tensor>> ZenFlow::state() {
  if (inheriting_) settle_inherited();  // a conversion: no step ran since the resume
  if (selected_) store_device_columns();
  int64_t *c = counters_.data_ptr<int64_t>();
  c[0] = summed_steps_;
  c[1] = host_updates_;
  c[2] = selections_;
  c[3] = last_selection_;
  c[4] = swap_due_ ? 1 : 0;
  c[5] = selected_ ? 1 : 0;
  if (!mask_.defined()) {
    const int64_t tables = int64_t(column_count(layout_, ZF_SEGMENT_TRANSPOSED));
    mask_ = torch::zeros({int64_t(columns_) - tables}, torch::kUInt8);
    table_mask_ = torch::ones({tables}, torch::kUInt8);  // a checkpoint without it: the tables were the device's
  }
  if (selected_) split_mask(layout_, selection_.mask, mask_.data_ptr<uint8_t>(), table_mask_.data_ptr<uint8_t>());
  saved_params_ = step_.params.defined() ? step_.params : torch::empty({int64_t(buffers_.numel())}, sum_.options().dtype(buffers_.dtype));
  // zenflow.staging: the waiting CPU result from its first element (a zfcore before the staggered
  // schedule's staging held one group wrote the whole shard: the resume reads either, resume_layout.hpp).
  std::vector<std::pair<std::string, torch::Tensor>> out = {{"zenflow.params", saved_params_},
                                                            {"zenflow.gradient_sum", sum_},
                                                            {"zenflow.staging", staging_},
                                                            {"zenflow.mask", mask_},
                                                            {"zenflow.counters", counters_}};
  if (table_mask_.numel() > 0) out.emplace_back("zenflow.table_mask", table_mask_);
  if (auto_topk_) {
    topk_.data_ptr<double>()[0] = options_.topk_ratio;  // 0: not chosen yet
    out.emplace_back("zenflow.topk_ratio", topk_);
  }
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
    out.emplace_back("zenflow.group_bounds", group_bounds_);  // for a resume on another layout
  }
  correction_state(out);
  return out;
}

std::vector<std::string> ZenFlow::optional_state() const {
  std::vector<std::string> names;
  if (auto_topk_) names.push_back("zenflow.topk_ratio");
  names.push_back("zenflow.table_mask");  // not in checkpoints from before tables had columns
  if (options_.staggered) names.push_back("zenflow.group_bounds");  // not in older checkpoints
  if (options_.correction != ZenFlowOptions::Correction::none) names.push_back("zenflow.correction");
  if (lookahead()) names.push_back("zenflow.last_cpu_update");
  return names;
}

void ZenFlow::restore(const torch::Tensor &params_shard) {
  const int64_t *c = counters_.data_ptr<int64_t>();
  summed_steps_ = c[0];
  host_updates_ = c[1];
  selections_ = c[2];
  last_selection_ = c[3];
  swap_due_ = c[4] != 0;
  if (auto_topk_) options_.topk_ratio = topk_.data_ptr<double>()[0];
  if (options_.staggered && !inheriting_) {  // else the next step takes the writer's (settle_inherited)
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
    std::vector<uint8_t> mask = join_mask(layout_, mask_.data_ptr<uint8_t>(), table_mask_.data_ptr<uint8_t>());
    // The writer's choice for the embedding: its tokens were chosen among where some are not selected.
    table_rows_ = auto_topk_ && !table_mask_.all().item<bool>();
    use_selection(make_selection(layout_, buffers_.shard_begin, buffers_.shard_end, mask));
  }
  torch::NoGradGuard no_grad;
  params_shard.copy_(saved_params_);
  saved_params_ = torch::Tensor();
  restore_correction(params_shard);
}

std::pair<uint64_t, uint64_t> ZenFlow::waiting() const {
  if (options_.staggered && swap_group_ >= 0) return {groups_[size_t(swap_group_)].begin, groups_[size_t(swap_group_)].end};
  if (!options_.staggered && swap_due_) return {0, buffers_.numel()};
  return {0, 0};
}

std::vector<std::pair<std::string, double>> ZenFlow::facts() const {
  return {{"zenflow_cpu_updates", double(host_updates_)}, {"zenflow_selections", double(selections_)},
          {"zenflow_cpu_lr_scale", options_.cpu_lr_scale}, {"zenflow_topk_ratio", options_.topk_ratio}};
}

double ZenFlow::selected_fraction() const {
  if (!selected_ || columns_ == 0) return 0;
  return double(std::count(selection_.mask.begin(), selection_.mask.end(), uint8_t(1))) / double(columns_);
}

}  // namespace zf
