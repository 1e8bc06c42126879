// fused_loss.hpp: the output projection and the cross-entropy computed together, in chunks, so that
// neither the [tokens, vocab] logits nor their float32 copies nor their gradient ever exist whole
// (the form Liger's fused linear cross-entropy published). The forward takes the tokens a chunk at a
// time (logits, their log-sum-exp, the loss) and keeps only each token's log-sum-exp; the backward
// takes the vocabulary a slice at a time, recomputes that slice of the logits for every token, and
// writes its rows of the weight's gradient once while summing the gradient of the hidden states.
// The numbers are the unfused loss's: logits in the compute dtype, the family's divisor and softcap
// applied in it, the softmax in float32. Where `fused` puts zfcore's kernels (a GPU's by default,
// the CPU's with FusedKernels::always) each chunk's softmax work is one kernel (fused_kernels.hpp) that
// reads the logits once in the forward, and in the backward writes their gradient over them;
// elsewhere libtorch's ops do it, exactly as the unfused loss.
#pragma once

#include "model/loss_chunks.hpp"
#include "model/transformer_shape.hpp"

#include <torch/torch.h>

#include <cstdint>

namespace zf {

// What a family does to the logits after the projection (decoder_features.hpp).
struct LogitsTransform {
  double divisor = 1;  // Granite: logits / logits_scaling
  double softcap = 0;  // Gemma: softcap * tanh(logits / softcap); 0 = none
};

// The logits x @ weight^T with `transform` applied, in the compute dtype (x's).
torch::Tensor output_logits(const torch::Tensor &x, const torch::Tensor &weight, LogitsTransform transform);

// Mean cross-entropy (float32, a scalar) over the rows whose target is not kIgnoreIndex of the logits
// output_logits(x, weight, transform); 0 when no row counts. x [N, H] (the final norm's output),
// weight [V, H] (the head, or the tied embedding), targets [N] (int64). Differentiable in x and weight.
// chunk_bytes bounds the float32 logits one chunk holds (0: kLossChunkBytes).
torch::Tensor fused_linear_cross_entropy(const torch::Tensor &x, const torch::Tensor &weight,
                                         const torch::Tensor &targets, LogitsTransform transform,
                                         int64_t chunk_bytes = 0, FusedKernels fused = FusedKernels::gpu);

}  // namespace zf
