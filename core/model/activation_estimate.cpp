#include "model/activation_estimate.hpp"

#include "model/gemma4_layout.hpp"
#include "model/loss_chunks.hpp"

#include <algorithm>

namespace zf {

namespace {

// Gemma 4's widest layer (gemma4.cpp): the sandwich's four norms and q, k, v's three, at the full layers'
// head size; the MLP at the shared layers' width; the per-layer input's gate, its product and its norm;
// the stream the layer writes (hidden state, per-layer inputs, shared keys and values); the experts.
uint64_t gemma4_layer_bytes_per_token(const TransformerShape &s, uint64_t e, uint64_t norm) {
  const uint64_t h = uint64_t(s.hidden);
  uint64_t widest = 0;
  for (int64_t l = 0; l < s.layers; ++l) {
    const uint64_t d = uint64_t(gemma4_head_dim(s, l)), q = uint64_t(s.heads) * d;
    const uint64_t kv = uint64_t(gemma4_kv_heads(s, l)) * d, i = uint64_t(gemma4_mlp_width(s, l));
    widest = std::max(widest, 4 * norm + (4 + 2 * e) * (q + 2 * kv) + e * (3 * q + 2 * kv) + e * 4 * i);
  }
  const Gemma4Spec &g = s.features.gemma4;
  if (g.experts > 0)  // the router's fp32 probabilities, three more norms, each chosen expert's rows and GeGLU
    widest += 4 * uint64_t(g.experts) + 3 * norm +
              uint64_t(g.top_k) * (e * (h + 4 * uint64_t(g.expert_intermediate)) + 4 * h);
  const uint64_t per = uint64_t(g.per_layer_hidden);
  return widest + (per > 0 ? norm + e * 2 * per : 0) + e * uint64_t(gemma4_stream_width(s)) + 4 * uint64_t(s.heads);
}

// Bytes per token that one layer's backward needs, element size e (2 bf16, 4 float32).
uint64_t layer_bytes_per_token(const TransformerShape &s, uint64_t e, uint64_t seq_len) {
  const uint64_t h = uint64_t(s.hidden), q = uint64_t(s.heads * s.head_dim()),
                 kv = uint64_t(s.kv_heads * s.head_dim()), i = uint64_t(s.intermediate), heads = uint64_t(s.heads);
  if (s.is_gpt2()) {
    // ln_1: its input and output; c_attn's q, k, v (one tensor, viewed by attention); attention's
    // output and its reshaped copy (c_proj's input); ln_2: input and output; c_fc's output (GELU's
    // input) and GELU's output (c_proj's input); attention's log-sum-exp in float32.
    return e * (2 * h + 3 * h + 2 * h + 2 * h + 2 * i) + 4 * heads;
  }
  // Each RMSNorm keeps its float32 input, the normalized value in the compute dtype and its output
  // (the next linears' input); attention keeps the rotated q and k, v, its output and the
  // reshaped copy (o_proj's input), and its log-sum-exp; the MLP keeps gate, silu(gate), up and
  // their product (down_proj's input).
  const uint64_t norm = 4 * h + 2 * e * h;
  if (s.features.gemma4.on) return gemma4_layer_bytes_per_token(s, e, norm);
  uint64_t mlp = e * 4 * i;
  const MoeSpec &m = s.features.moe;
  if (m.experts > 0) {
    // A mixture of experts (moe.hpp): the router's float32 probabilities; the token's k gathered rows,
    // and for each of them gate, silu(gate), up and their product at the experts' width; the k
    // weighted outputs in float32, before and after going back to token order.
    const uint64_t k = uint64_t(m.top_k), inner = uint64_t(m.expert_intermediate);
    mlp = std::max(mlp, 4 * 2 * uint64_t(m.experts) + e * k * (h + 4 * inner) + 4 * 2 * k * h);
    // A shared expert (moe_shared.hpp): its gate, silu(gate), up, their product, its output and its score.
    if (m.shared_intermediate > 0) mlp += e * (4 * uint64_t(m.shared_intermediate) + h + 2);
  }
  // Attention with sinks: each query's float32 softmax over its row of seq_len scores (and the sink), its
  // copy in the compute dtype (the product with v's input), and k and v repeated over the query heads.
  const uint64_t sinks = s.features.attention_sinks ? heads * (seq_len + 1) * (4 + e) + 2 * e * q : 0;
  return 2 * norm + e * (3 * q + 2 * kv) + mlp + 4 * heads + sinks;
}

}  // namespace

ActivationEstimate estimate_activations(const TransformerOptions &options, uint64_t tokens, uint64_t seq_len) {
  const TransformerShape &s = options.shape;
  const uint64_t e = options.dtype == "bfloat16" ? 2 : 4, h = uint64_t(s.hidden), v = uint64_t(s.vocab);
  const uint64_t layer = layer_bytes_per_token(s, e, seq_len) * tokens;
  ActivationEstimate a;
  const uint64_t norm = s.is_gpt2() ? 2 * e * h : 4 * h + 2 * e * h;
  if (options.fused != FusedKernels::off) {
    // The fused loss (fused_loss.hpp) on a GPU: the final norm's saved tensors and each token's
    // float32 log-sum-exp, beside one chunk of tokens' logits in the compute dtype (its kernel reads
    // them once); in the backward one slice of the vocabulary for every token (the logits, then their
    // gradient in their place) and the hidden states' gradient in float32 with one slice's product.
    const uint64_t rows = uint64_t(loss_chunk_rows(int64_t(v), int64_t(tokens)));
    const uint64_t slice = uint64_t(loss_chunk_rows(int64_t(tokens), int64_t(v)));
    a.head = (norm + 4) * tokens + rows * v * e;
    a.head_backward = 4 * tokens + slice * tokens * e + 8 * h * tokens;
  } else {
    // The head: the final norm's saved tensors, the logits in the compute dtype, their float32 copy
    // and log_softmax's float32 output (one tensor when the compute dtype is float32).
    a.head = (norm + v * (e == 4 ? 8 : e + 8)) * tokens;
    a.head_backward = v * e * tokens;
  }
  const uint64_t layers = uint64_t(s.layers);
  if (options.activation_checkpointing) {
    a.per_layer = e * uint64_t(s.features.gemma4.on ? gemma4_stream_width(s) : s.hidden) * tokens;  // the input
    a.layer_recompute = layer;
    a.whole_layers = options.checkpoint_layers > 0 ? layers - uint64_t(options.checkpoint_layers) : 0;
  } else {
    a.per_layer = layer;
  }
  // The layers kept whole hold their sets until their own backward, which runs before any
  // recompute: at the head they add to it, at a recompute they are gone. By the head's backward
  // the loss's float32 copies are freed; its gradient of the logits is what remains there.
  const uint64_t whole = a.whole_layers * layer, kept = (layers - a.whole_layers) * a.per_layer;
  a.at_loss = kept + whole + a.head;
  a.in_backward = kept + std::max(whole + a.head_backward, a.layer_recompute);
  return a;
}

}  // namespace zf
