// gated_deltanet.hpp: the Gated DeltaNet token mixer of Qwen3.5's linear-attention layers, as
// transformers computes it: q, k and v from one projection through a causal depthwise convolution
// with SiLU; per value head a decay g = -exp(A_log) * softplus(a + dt_bias) and a write strength
// beta = sigmoid(b); the gated delta rule over L2-normalised q and k, chunked, in fp32; an RMSNorm
// of each head gated by SiLU(z); the output projection. Libtorch ops, batched over the chunks of the
// delta rule; only its recurrence across chunks loops, with a backward of its own.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace zf {

struct DeltaNetWeights {
  torch::Tensor in_proj_qkv;  // [2 * key_heads * key_dim + value_heads * value_dim, hidden]
  torch::Tensor in_proj_z;    // [value_heads * value_dim, hidden]: the output gate
  torch::Tensor in_proj_b;    // [value_heads, hidden]: beta before its sigmoid
  torch::Tensor in_proj_a;    // [value_heads, hidden]: the decay's input
  torch::Tensor conv1d;       // [conv channels, 1, kernel]: depthwise, causal, no bias
  torch::Tensor dt_bias;      // [value_heads]
  torch::Tensor A_log;        // [value_heads]
  torch::Tensor norm;         // [value_dim]: the gated RMSNorm's weight
  torch::Tensor out_proj;     // [hidden, value_heads * value_dim]
};

// x [B, T, hidden] -> [B, T, hidden]. `key_dim` and `value_dim` are per head; `eps` is the gated
// norm's (rms_norm_eps). The result has x's dtype. `positions` [B, T] (packed documents, each
// starting at position 0): the convolution and the state start afresh at every document, as if each
// were a sequence of its own; undefined: one sequence per row.
torch::Tensor gated_deltanet(const DeltaNetWeights &w, const torch::Tensor &x, int64_t key_heads, int64_t key_dim,
                             int64_t value_heads, int64_t value_dim, double eps,
                             const torch::Tensor &positions = torch::Tensor());

// The gated delta rule, computed in fp32 over chunks of `chunk` positions (a power of two). q, k [B, T, H, dk] (already
// L2-normalised; q is scaled by dk^-1/2 here), v [B, T, H, dv], g (log decay, <= 0) and beta [B, T, H].
// Per head, with S_0 = 0: S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T, and
// the output o_t = S_t^T q_t. `starts` [B, T] bool (or undefined): where it is true, S_{t-1} is taken
// as 0 (a document starts there). Returns [B, T, H, dv] in fp32.
torch::Tensor chunk_gated_delta_rule(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v,
                                     const torch::Tensor &g, const torch::Tensor &beta, int64_t chunk = 64,
                                     const torch::Tensor &starts = torch::Tensor());

}  // namespace zf
