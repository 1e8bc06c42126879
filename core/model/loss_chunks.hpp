// loss_chunks.hpp: how large the fused loss's chunks are (model/fused_loss.hpp), without libtorch,
// so that the memory estimate (activation_estimate.hpp) counts what the loss holds.
#pragma once

#include <algorithm>
#include <cstdint>

namespace zf {

// The float32 logits of one chunk: 256 MiB (about 440 tokens of a 152k vocabulary in the forward,
// 16k entries of the vocabulary for 4096 tokens in the backward). On a GPU the chunk is held once,
// in the compute dtype (half of this in bf16; a kernel works on it in place); on the CPU its float32
// copies make it 2.5 to 3 times this.
constexpr int64_t kLossChunkBytes = int64_t(256) << 20;

// Rows of `width` float32 values that fit in chunk_bytes (0: kLossChunkBytes): at least 1, at most
// `rows`, a multiple of 64 where that leaves at least 64.
inline int64_t loss_chunk_rows(int64_t width, int64_t rows, int64_t chunk_bytes = 0) {
  const int64_t budget = chunk_bytes > 0 ? chunk_bytes : kLossChunkBytes;
  int64_t n = std::max<int64_t>(1, budget / (4 * std::max<int64_t>(width, 1)));
  if (n >= 64) n -= n % 64;
  return std::min(n, std::max<int64_t>(rows, 1));
}

}  // namespace zf
