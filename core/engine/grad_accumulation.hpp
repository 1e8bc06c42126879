// grad_accumulation.hpp: train.grad_accum_dtype = "float32" on a model that computes in bf16: the
// micro-steps' gradients add up in an fp32 buffer (DeepSpeed's data_types.grad_accum_dtype = "fp32",
// FSDP2's MixedPrecisionPolicy), not in the bf16 gradients, where each addition rounds and small
// micro-batch gradients are lost under a large sum. After each micro-step but the last, the bf16
// gradients go into the fp32 sum and are zeroed; in the last one each block's gradients become the
// fp32 sum plus the last micro-batch's, rounded to bf16 once, before the stage reduces them and the
// update copies them (so every offload tier and an overlapped update see the whole sum). Built for
// stages that hold the whole gradients (zero0, zero1); the reduction keeps the compute dtype.
#pragma once

#include "config/config.hpp"
#include "engine/placement.hpp"
#include "params/flat_buffers.hpp"
#include "runtime/memory.hpp"

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace zf {

class Fp32GradAccumulation {
 public:
  // The fp32 sum `sum` (zeros, as many elements) of the flat gradients `grads`, whose blocks `layout` lists.
  Fp32GradAccumulation(torch::Tensor grads, const zf_layout &layout, torch::Tensor sum);
  // A micro-step's backward is done: all but the last add their gradients to the sum; in the last
  // one the blocks not folded yet are (fold_block).
  void micro_step_done(bool last);
  // In the last micro-step, block `block`'s backward is done: its gradients become the whole sum
  // (once per step; a tied weight's later part adds in bf16).
  void fold_block(uint32_t block);

 private:
  torch::Tensor grads_, sum_;  // the flat gradients (compute dtype), their fp32 sum
  const zf_layout &layout_;
  std::vector<bool> folded_;   // per block, in this step's last micro-step
};

// The accumulation train.grad_accum_dtype asks for: null where the gradients accumulate in the
// compute dtype ("auto", an fp32 model, or one micro-step); throws for a stage that reduces block by
// block into sharded gradients (zero2, zero3), which this does not cover.
std::unique_ptr<Fp32GradAccumulation> fp32_grad_accumulation(const RunConfig &config, const Placement &placement,
                                                             FlatBuffers &flat, Runtime &runtime, const char *stage);

}  // namespace zf
