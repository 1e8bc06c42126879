// rope.hpp: rotary position embeddings as Hugging Face computes them: the inverse frequencies of
// each rope_type (default, linear, llama3, yarn, proportional) and the cos / sin tables they give.
#pragma once

#include "model/decoder_features.hpp"

#include <torch/torch.h>

namespace zf {

struct RopeTables {
  torch::Tensor cos, signed_sin;  // [T, rotated]: cos | cos and -sin | sin, in the model's dtype
};

// The inverse frequencies [rotated / 2] (fp32) of `spec` over `rotated` channels of each head, and
// the factor yarn scales cos and sin by (1 elsewhere). `max_seq` is max_position_embeddings.
std::pair<torch::Tensor, double> rope_inverse_frequencies(const RopeSpec &spec, int64_t rotated, int64_t max_seq);

// The tables for positions 0..length-1, computed in fp32 and cast to `like`'s dtype and device.
RopeTables rope_tables(const RopeSpec &spec, int64_t rotated, int64_t max_seq, int64_t length,
                       const torch::Tensor &like);

// The rows of `tables` at each token's position (positions [B, T], each below the tables' length):
// [B, 1, T, rotated], for packed documents whose positions restart.
RopeTables rope_at(const RopeTables &tables, const torch::Tensor &positions);

// x [B, heads, T, head_dim] rotated over its first tables.cos.size(-1) channels (the rest pass).
torch::Tensor apply_rope(const torch::Tensor &x, const RopeTables &tables);  // tables [T, r] or [B, 1, T, r]

}  // namespace zf
