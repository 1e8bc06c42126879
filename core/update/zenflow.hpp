// zenflow.hpp: ZenFlow on top of the update plan (a [zenflow] table in the config).
//
// Every step the selected gradient columns (the selector's top k of each weight) and every 1-D
// parameter are updated where the model computes, by a second optimizer (gpu_adam on a GPU run)
// over a compact copy of their master and moments. The gradients of all columns are summed on the
// device, and the plan's CPU optimizer updates the other columns of the host master on the update
// thread from their mean, one step per update_interval (U) steps. Two schedules:
// - staggered (the default): the shard is cut into U groups; each step one group's sum goes down
//   and its CPU update runs while the device computes the next step, whose end swaps it in. Each
//   column waits 1 to U steps for its update, and the CPU load is the same every step.
// - deepspeed (the reference's): every U steps (a boundary) the whole sum goes down, and its CPU
//   update is swapped in at the next boundary: U to 2U - 1 steps late.
// overlap_step = false swaps each CPU update in at once (the step waits for it). At most one CPU
// update is in flight; its compute-precision result is uploaded into a staging buffer, and the
// swap keeps the device's values of the selected columns.
//
// topk_ratio = "auto" is chosen at the first selection, from the memory left (zenflow_topk.cpp). A
// selection that leaves the CPU no column (topk 1) skips the gradient sums, the CPU updates and
// later selections; over the whole shard, the device's update runs in place, as without offload.
//
// Selection (the first ZenFlow step, then every select_interval steps): the CPU updates still
// owed are applied, the device's master and moments of the selected columns go back into the
// host's, the selector scores the step's reduced gradients (score vectors summed over ranks) and
// picks the new columns, whose master and moments come from the host's: a column keeps one master
// and one moment chain wherever it is updated (DeepSpeed resets the moments of newly selected
// columns instead).
#pragma once

#include "update/column_selection.hpp"
#include "update/update_schedule.hpp"
#include "update/zenflow_options.hpp"

#include <string>
#include <utility>
#include <vector>

namespace zf {

class ZenFlow : public UpdateSchedule {
 public:
  // host: the offloaded update's host side (ZenFlow needs the master in host memory).
  ZenFlow(UpdateBuffers &buffers, HostUpdate *host, const zf_layout &layout, const ZenFlowOptions &options);
  ~ZenFlow() override;

  void add_planned(std::vector<PlannedBuffer> &planned) const override;
  void allocate() override;
  // Steps up to full_warm_up_rounds are plain (synchronous) offload steps (warm_up_).
  void begin(const StepTensors &step) override;
  void gradients_final(uint64_t begin, uint64_t end, void *stream) override;
  void finish(float mean_scale, float clip, bool defer) override;
  void forward_launched() override { host_.release(); }
  void ready_for(uint64_t begin, uint64_t end) override { host_.ready_for(begin, end); }
  void finish_step() override { host_.finish_step(); }
  // After the last step: the pending CPU update swapped in, the partial intervals applied, the
  // device's columns written into the host master. Nothing is left to do when called again.
  void complete() override;
  // Checkpoints: the device's columns written into the host master and state, then ZenFlow's own
  // tensors (working parameters, gradient sum, mask, counters).
  std::vector<std::pair<std::string, torch::Tensor>> state() override;
  std::vector<std::string> optional_state() const override;  // topk "auto": chosen again when absent
  void restore(const torch::Tensor &params_shard) override;
  std::pair<uint64_t, uint64_t> waiting() const override;
  void inherit(InheritedSchedule schedule) override { inherited_ = std::move(schedule), inheriting_ = true; }

  std::string events() const override { return events_; }
  std::vector<std::pair<std::string, double>> facts() const override;
  double selected_fraction() const override;

 private:
  // A group of the staggered schedule: shard elements [begin, end), the steps summed since its
  // last CPU update, its CPU updates (bias correction), and its selected columns' positions
  // [compact_begin, compact_end) in the compact tensors.
  // weight: what the window's gradients weigh together (summed, unless correction = age_gate
  // weighed a stale one less); swapped_at: the step whose end swapped in the group's last update.
  struct Group {
    uint64_t begin = 0, end = 0;
    int64_t summed = 0, updates = 0;
    int64_t compact_begin = 0, compact_end = 0;
    double weight = 0;
    int64_t swapped_at = 0;
  };
  bool active(int64_t step) const { return step > options_.warm_up; }
  // Every element of the shard is the device's (topk 1): no index, the result written in place, no
  // gradient sums or CPU updates, and no later selection (it would not change).
  bool whole() const { return selection_.host.empty(); }
  bool reselect_due(int64_t step) const { return !whole() && step - last_selection_ >= options_.select_interval; }
  void note(const char *event);
  void step(int64_t step, float mean_scale, float clip);  // after the backward of an active step
  void deepspeed_step(int64_t step, float clip);
  void staggered_step(int64_t step, float clip);
  void accumulate_groups(float clip);
  void hand_over_group(size_t group);
  bool hand_over_group(Group &g);  // false: nothing to update
  void swap_in_group();
  void swap_in_group(Group &g);
  void settle_inherited();  // zenflow_inherit.cpp
  int64_t compact_position(uint64_t element) const;  // the device's elements before a shard element
  void flush_groups();
  void hand_over(HostJob job, double weight);  // both schedules
  // zenflow.correction (zenflow_correction.cpp)
  bool lookahead() const { return options_.correction == ZenFlowOptions::Correction::lookahead; }
  bool age_gate() const { return options_.correction == ZenFlowOptions::Correction::age_gate; }
  void write_group(const Group &g);  // its CPU result from the start of staging_
  void keep_leaving_columns();
  void settle_lookahead();
  void correction_state(std::vector<std::pair<std::string, torch::Tensor>> &out);
  void restore_correction(const torch::Tensor &params_shard);
  bool boundary();
  void select(int64_t step);
  void choose_topk();  // at the first selection: topk_ratio = "auto", and what a fraction costs from scratch
  uint64_t staging_numel() const;  // zenflow_staggered.cpp
  uint64_t selected_element_bytes() const;
  void use_selection(Selection selection);
  zf_select_args select_args(const torch::Tensor &grads) const;
  std::vector<float> scores(const torch::Tensor &grads);
  void store_device_columns();
  void update_selected(int64_t step, float scale);
  void accumulate(float clip);
  void start_host_update();
  void swap_in();
  torch::Tensor device_span(const torch::Tensor &shard) const;  // the device's columns as one view, if they are one span
  torch::Tensor host_gather(const torch::Tensor &source) const;
  void host_scatter(const torch::Tensor &compact, torch::Tensor &destination) const;
  torch::Tensor gather_state(size_t i) const;  // the host's state tensor i, in memory or on disk
  void scatter_state(size_t i);

  UpdateBuffers &buffers_;
  HostUpdate &host_;
  const zf_layout &layout_;
  ZenFlowOptions options_;
  uint32_t columns_ = 0;
  const OptimizerPlugin &optimizer_;  // the device-side optimizer (plugins.device_optimizer())

  Selection selection_;
  bool selected_ = false;
  torch::Tensor index_;                             // device ranges' shard elements, on the model's tier
  std::vector<zf_optimizer_range> compact_ranges_;  // the device ranges in compact elements
  torch::Tensor master_, params_out_;               // compact fp32 master, compute-precision result
  std::vector<torch::Tensor> state_;                // compact optimizer state (the device optimizer's)
  std::vector<StateSpec> state_specs_;               // the device optimizer's
  std::vector<size_t> host_state_of_;               // index into the buffers' state for each of state_

  torch::Tensor sum_;      // gradients summed since the last CPU update (shard, model tier)
  torch::Tensor staging_;  // the CPU update's result from its first element (staging_numel), swapped in later
  bool sum_copied_pending_ = false;  // sum_ is being copied down: wait before writing it
  int64_t summed_steps_ = 0, host_updates_ = 0, selections_ = 0, last_selection_ = 0;
  float mean_scale_ = 1;  // the last step's 1 / (ranks * micro-steps)
  bool swap_due_ = false;  // a CPU update's result waits in staging_ (deepspeed schedule)
  std::vector<Group> groups_;  // staggered schedule
  int64_t next_group_ = 0, swap_group_ = -1;  // the group handed over next; the one whose result waits
  torch::Tensor group_counters_;  // checkpoint view of groups_, next_group_ and swap_group_ (int64)
  torch::Tensor group_bounds_;    // checkpoint view of the groups' first elements, then numel (int64)
  InheritedSchedule inherited_;   // a checkpoint of another layout's groups, until the next step
  bool inheriting_ = false;
  // Checkpoint views of the counters above (int64) and the mask: weights', tables' (column_selection.hpp).
  torch::Tensor counters_, mask_, table_mask_;
  bool table_rows_ = false;  // the embedding's tokens are chosen among, not kept whole (zenflow_topk.cpp)
  const bool auto_topk_;  // topk_ratio = "auto": options_.topk_ratio is 0 until chosen
  torch::Tensor topk_;    // checkpoint view of the chosen topk_ratio (float64; auto only)
  torch::Tensor saved_params_;  // the working parameters a checkpoint holds
  // correction = lookahead: each element's last CPU result (compute precision, the model's tier),
  // from which the next one is extrapolated; settling_: the run's end swaps in without looking ahead.
  torch::Tensor last_cpu_;
  bool settling_ = false;
  torch::Tensor correction_;  // checkpoint view: each group's weight, then 1 when last_cpu_ is kept (float64)
  std::string events_;
  StepTensors step_;
  EveryStep warm_up_;  // after host_updates_: it counts the warm-up's CPU steps there
};

}  // namespace zf
