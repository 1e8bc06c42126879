// zenflow_inherit.cpp: a staggered ZenFlow checkpoint continued on another layout. The writer's
// groups are other ranges of the flat parameters than this run's, so what they owe (the gradients
// summed since each one's last CPU update, and the result of the last one handed over) is applied
// at the first step, group by group with the writer's counts, as the writer's own next step does
// before a selection (flush_groups): the same updates of the same elements. From then on the
// groups are this layout's, each continuing the CPU update count of the writer's group it overlaps
// (the largest, where it overlaps several): the count of its bias correction. The writer's waiting
// results come with the groups (read from its zenflow.staging by the resume).
#include "update/zenflow.hpp"

#include "runtime/error.hpp"
#include "runtime/tensors.hpp"

#include <algorithm>

namespace zf {

void ZenFlow::settle_inherited() {
  inheriting_ = false;
  std::vector<Group> writer;
  bool owed = false;
  for (const WriterGroup &w : inherited_.groups) {
    Group g;
    g.begin = w.begin;
    g.end = w.end;
    g.summed = w.summed;
    g.updates = w.updates;
    g.weight = w.weight;
    g.compact_begin = compact_position(w.begin);
    g.compact_end = compact_position(w.end);
    writer.push_back(g);
    owed = owed || w.waiting || w.summed > 0;
  }
  // A run that converts the checkpoint trains no step: there is no step's learning rate to apply them with.
  ZF_REQUIRE(!owed || step_.params.defined(),
             "the checkpoint owes ZenFlow CPU updates of another layout's groups, which this layout applies at its "
             "first step: train at least one step (raise train.steps), or convert a checkpoint that owes none");
  if (owed && selected_) {
    // staging_ holds one of this layout's groups; a writer's group may be larger (fewer ranks or
    // groups): a staging buffer that holds the largest of them, for these updates only.
    uint64_t largest = 0;
    for (const Group &g : writer) largest = std::max(largest, g.end - g.begin);
    const uint64_t planned = uint64_t(staging_.numel());
    if (largest > planned) {
      staging_ = torch::Tensor();
      staging_ = ledger_tensor(buffers_.runtime.memory, buffers_.model_tier, largest, buffers_.dtype, "zenflow.staging");
    }
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < writer.size(); ++i) {
      const WriterGroup &w = inherited_.groups[i];
      if (!w.waiting) continue;
      ZF_REQUIRE(w.staged.defined() && uint64_t(w.staged.numel()) == w.end - w.begin,
                 "the checkpoint's zenflow.staging does not hold the waiting CPU update of the writer's group [%llu, "
                 "%llu) of this rank's shard: the checkpoint is damaged", (unsigned long long)w.begin,
                 (unsigned long long)w.end);
      staging_.narrow(0, 0, w.staged.numel()).copy_(w.staged);
      swap_in_group(writer[i]);
    }
    for (Group &g : writer)
      if (hand_over_group(g)) swap_in_group(g);
    if (largest > planned) {  // back to the planned size (the last job's reference goes with the next job)
      staging_ = torch::Tensor();
      staging_ = ledger_tensor(buffers_.runtime.memory, buffers_.model_tier, planned, buffers_.dtype, "zenflow.staging");
    }
  }
  for (Group &own : groups_) {
    own.summed = 0;
    own.weight = 0;
    own.updates = 0;
    for (const Group &g : writer)
      if (g.begin < own.end && own.begin < g.end) {
        own.updates = std::max(own.updates, g.updates);
        own.swapped_at = std::max(own.swapped_at, g.swapped_at);
      }
  }
  next_group_ = groups_.empty() ? 0 : inherited_.next_group % int64_t(groups_.size());
  swap_group_ = -1;
  inherited_ = InheritedSchedule();
}

}  // namespace zf
