// attention.hpp: causal self-attention over heads, with grouped-query heads, an optional sliding
// window and softmax scale, and packed documents that each attend only to themselves, on the fastest
// kernel that computes it exactly.
#pragma once

#include "model/model.hpp"

#include <torch/torch.h>

namespace zf {

struct AttentionOptions {
  int64_t window = 0;   // > 0: a query at i sees keys j with i - window < j <= i (Mistral, Gemma 3, OLMo 3)
  double scale = 0;     // softmax scale; 0 = 1 / sqrt(head_dim)
  double dropout = 0;   // on the attention weights, while training
  // Packed rows (data.packing): a query sees only the keys of its own document. Null or undefined:
  // one sequence per row.
  const PackedDocuments *documents = nullptr;
  // [heads]: a learned logit per head that joins every query's softmax and takes no value (gpt-oss's
  // sinks). Computed as an explicit softmax over the [T, T] scores on every device (no flash kernel
  // takes sinks): memory grows with T^2 per layer. Undefined: none.
  torch::Tensor sinks;
};

// q [B, heads, T, d]; k and v [B, kv_heads, T, d] with heads a multiple of kv_heads. Returns [B, heads, T, d].
torch::Tensor causal_attention(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v,
                               const AttentionOptions &options);

}  // namespace zf
