// grad_accumulation.hpp: train.grad_accum_dtype = "float32" on a model that computes in bf16
// (DeepSpeed's data_types.grad_accum_dtype = "fp32", FSDP2's MixedPrecisionPolicy.reduce_dtype):
// the gradients the stage reduces and the optimizer reads are fp32. The backward still writes
// bf16 gradients; each micro-step's go into an fp32 sum, where no addition rounds to bf16, and the
// sum is what the stage reduces across ranks (in fp32) and the update reads (no bf16 round trip).
// Stages that hold the whole gradients (zero0, zero1) sum here, over the flat buffer; stages that
// reduce block by block (zero2, zero3) keep an fp32 gradient shard, widen each block's gradients
// and reduce them into it (plugins/stages/common/zero_shard.hpp's BlockReducer).
#pragma once

#include "config/config.hpp"

#include <torch/torch.h>

#include <zf/zf_plugin.h>

#include <vector>

namespace zf {

// The dtype of the gradients a stage reduces and the optimizer reads: float32 under
// train.grad_accum_dtype = "float32" (a bf16 or fp16 model), else the compute dtype.
torch::Dtype reduced_grad_dtype(const RunConfig &config, torch::Dtype compute);

// The fp32 sum of the whole flat gradients (zero0, zero1).
class Fp32GradAccumulation {
 public:
  // The fp32 sum `sum` (as many elements) of the flat compute-precision gradients `grads`, whose
  // blocks `layout` lists.
  Fp32GradAccumulation(torch::Tensor grads, const zf_layout &layout, torch::Tensor sum);
  const torch::Tensor &sum() const { return sum_; }
  // A micro-step's backward is done (`first`: the step's first): all but the last move their
  // gradients into the sum; in the last one the blocks not folded yet are (fold_block).
  void micro_step_done(bool first, bool last);
  // In the last micro-step, block `block`'s backward is done: its gradients join the sum (the
  // first of a step replaces last step's) and are zeroed, before the stage reduces the block.
  void fold_block(uint32_t block, bool first);

 private:
  torch::Tensor grads_, sum_;  // the flat gradients (compute dtype), their fp32 sum
  const zf_layout &layout_;
  std::vector<bool> folded_;   // per block, in this step's last micro-step
};

}  // namespace zf
