// clip_speculation.hpp: the copy that lets an offloaded update start before the global gradient
// norm is known (train.clip_grad_norm). The update thread updates each bucket as its gradients
// land, with the step's unclipped scale, after keeping the bucket's fp32 master and optimizer state
// here; where clipping fires, the bucket gets them back and is updated again with the clipped scale:
// the same arithmetic from the same values as waiting for the norm, so the same bits.
// The copy is one more master and state of the host's part (planned, in the memory ledger).
#pragma once

#include "update/update_buffers.hpp"

#include <cstdint>
#include <vector>

namespace zf {

class ClipSpeculation {
 public:
  // Whether the update of `buffers` can be put back from a copy: its master and state are host-held
  // tensors and the working parameters live where the model computes (not on disk: a tile's
  // write-behind would have to be undone; not with the parameters in host memory, as cpu_full's,
  // which the update writes in place or beside the blocks copied up; not an optimizer that keeps
  // its own state).
  static bool applies(const UpdateBuffers &buffers);
  // The host updates shard elements [from, numel) (offload.ratio < 1 leaves it the rest).
  ClipSpeculation(UpdateBuffers &buffers, uint64_t from);
  void add_planned(std::vector<PlannedBuffer> &planned) const;
  void allocate();
  uint64_t bytes() const;
  // On the update thread: shard elements [begin, end) before their speculative update, and back.
  void keep(uint64_t begin, uint64_t end);
  void restore(uint64_t begin, uint64_t end);

 private:
  zf_tier tier() const;
  std::vector<std::string> tags() const;  // the master's copy, then each state tensor's
  void copy(uint64_t begin, uint64_t end, bool back);

  UpdateBuffers &buffers_;
  const uint64_t from_;
  std::vector<torch::Tensor> copies_;  // as tags()
};

}  // namespace zf
