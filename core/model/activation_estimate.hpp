// activation_estimate.hpp: the bytes a transformer's forward keeps for its backward (the
// activations), per rank, from its shape, the micro-batch and the sequence length: what the GPU
// holds beyond the plan's buffers at its peak. Counted from what autograd saves in this zoo's
// layers (model/llama.cpp, model/gpt2.cpp: each saved tensor once), at the two moments the peak
// can fall on: the loss at the end of the forward (the logits and their float32 copies; with the
// fused loss one chunk of them), or the backward (the logits' gradient at the head, or the fused
// loss's slice, then a layer recomputed under activation checkpointing). Which one is the GPU's peak depends on the buffers held at each
// (memory/config_estimate.hpp, estimate_gpu_peak).
#pragma once

#include "model/transformer_shape.hpp"

#include <cstdint>

namespace zf {

struct ActivationEstimate {
  uint64_t per_layer = 0;  // bytes one layer keeps for its backward (its input alone when checkpointed)
  uint64_t layer_recompute = 0;  // under activation checkpointing: one layer's full set while it is recomputed
  uint64_t whole_layers = 0;     // under activation checkpointing: the last layers, not recomputed (their full sets)
  uint64_t head = 0;       // the final norm, the logits and the loss's float32 copies at the end of the forward
                           // (model.fused: one chunk of tokens' logits)
  uint64_t head_backward = 0;  // the logits' gradient in the compute dtype, as the head's backward begins
                               // (model.fused: one slice of the vocabulary's, and the hidden states')
  uint64_t at_loss = 0;        // the most at the loss: the layers' sets, the layers kept whole and the head
  uint64_t in_backward = 0;    // the most in the backward: the layers' sets plus the larger of the head's
                               // gradient (with the layers kept whole) and a layer recomputed
  uint64_t peak() const { return at_loss > in_backward ? at_loss : in_backward; }
};

// tokens: micro_batch x seq_len of one micro-step on this rank. seq_len counts where attention is an
// explicit softmax over [seq_len, seq_len] scores (gpt-oss's sinks: attention.hpp); 0: nowhere.
ActivationEstimate estimate_activations(const TransformerOptions &options, uint64_t tokens, uint64_t seq_len = 0);

}  // namespace zf
