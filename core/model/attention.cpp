// Causal self-attention (attention.hpp). Full causal attention goes to libtorch's SDPA, which picks
// flash or memory-efficient kernels on a GPU. A sliding window that is shorter than the sequence
// goes on a GPU to the flash kernel's window (no mask in memory), elsewhere to SDPA with a boolean
// mask of the band. Packed documents go on a GPU to the flash kernel's variable-length form (each
// document a sequence of its own, cu_seqlens = the batch's document starts, no mask in memory),
// elsewhere to SDPA with a block-diagonal causal mask (and the band, with a window). Attention with
// sinks (gpt-oss) is an explicit softmax whose denominator adds each head's sink, under the same masks.
#include "model/attention.hpp"

#include <ATen/Context.h>

#include <cmath>
#include <limits>
#include <optional>

namespace zf {
namespace {

// FlashAttention's own entry takes the window and cu_seqlens; it wants fp16 or bf16, on a GPU.
bool flash_kernel(const torch::Tensor &q, const AttentionOptions &options) {
  return q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) &&
         q.size(-1) <= 256 && q.size(-1) % 8 == 0 && !at::globalContext().deterministicAlgorithms() &&
         options.dropout == 0;
}

// [B, 1, T, T]: query i sees key j of its own document (positions restart at 0 where one begins),
// causally, within the window if there is one.
torch::Tensor document_mask(const torch::Tensor &positions, int64_t window) {
  const int64_t length = positions.size(1);
  torch::Tensor document = positions.eq(0).cumsum(1);  // [B, T]: which document of its row
  torch::Tensor i = torch::arange(length, positions.options()).unsqueeze(1);
  torch::Tensor j = torch::arange(length, positions.options()).unsqueeze(0);
  torch::Tensor mask = document.unsqueeze(2).eq(document.unsqueeze(1)).logical_and(j <= i);
  if (window > 0) mask = mask.logical_and(j > i - window);
  return mask.unsqueeze(1);
}

// The keys query i sees: [T, T] (causal, within the window), or [B, 1, T, T] with packed documents.
torch::Tensor visible(const torch::Tensor &q, const AttentionOptions &options, int64_t window) {
  if (options.documents != nullptr && options.documents->defined())
    return document_mask(options.documents->positions.to(q.device()), window);
  const int64_t length = q.size(2);
  torch::Tensor i = torch::arange(length, q.options().dtype(torch::kLong)).unsqueeze(1);
  torch::Tensor j = torch::arange(length, q.options().dtype(torch::kLong)).unsqueeze(0);
  torch::Tensor mask = j <= i;
  return window > 0 ? mask.logical_and(j > i - window) : mask;
}

// k or v [B, kv_heads, T, d] repeated over each group of query heads: [B, heads, T, d].
torch::Tensor repeat_kv(const torch::Tensor &t, int64_t heads) {
  const int64_t batch = t.size(0), kv_heads = t.size(1), length = t.size(2), d = t.size(3);
  return t.unsqueeze(2).expand({batch, kv_heads, heads / kv_heads, length, d}).reshape({batch, heads, length, d});
}

// softmax([scores | sink]) without the sink's column, times v; the scores and softmax in fp32.
torch::Tensor sink_attention(const torch::Tensor &q, const torch::Tensor &k_in, const torch::Tensor &v_in,
                             const AttentionOptions &options, int64_t window) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), d = q.size(3);
  const double scale = options.scale > 0 ? options.scale : 1.0 / std::sqrt(double(d));
  torch::Tensor scores = torch::matmul(q, repeat_kv(k_in, heads).transpose(2, 3)).to(torch::kFloat32) * scale;
  scores = scores.masked_fill(visible(q, options, window).logical_not(), -std::numeric_limits<float>::infinity());
  torch::Tensor sinks = options.sinks.to(torch::kFloat32).view({1, heads, 1, 1}).expand({batch, heads, length, 1});
  torch::Tensor probs = torch::softmax(torch::cat({scores, sinks}, -1), -1).narrow(-1, 0, length);
  if (options.dropout > 0) probs = torch::dropout(probs, options.dropout, /*train=*/true);
  return torch::matmul(probs.to(v_in.scalar_type()), repeat_kv(v_in, heads));
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor &q, const torch::Tensor &k_in, const torch::Tensor &v_in,
                               const AttentionOptions &options) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), d = q.size(3), kv_heads = k_in.size(1);
  const bool packed = options.documents != nullptr && options.documents->defined();
  const bool windowed = options.window > 0 && options.window < length;
  const std::optional<double> scale = options.scale > 0 ? std::optional<double>(options.scale) : std::nullopt;
  const std::optional<int64_t> left = windowed ? std::optional<int64_t>(options.window - 1) : std::nullopt;
  if (options.sinks.defined()) return sink_attention(q, k_in, v_in, options, windowed ? options.window : 0);
  if (packed && flash_kernel(q, options)) {
    // [B*T, heads, d]: the rows one after another, each document a sequence of the batch.
    auto tokens = [&](const torch::Tensor &t) { return t.transpose(1, 2).reshape({batch * length, t.size(1), d}); };
    const PackedDocuments &documents = *options.documents;
    auto out = at::_flash_attention_forward(tokens(q), tokens(k_in), tokens(v_in), documents.starts, documents.starts,
                                            documents.longest, documents.longest, 0.0, /*is_causal=*/true,
                                            /*return_debug_mask=*/false, scale, left,
                                            windowed ? std::optional<int64_t>(0) : std::nullopt);
    return std::get<0>(out).view({batch, length, heads, d}).transpose(1, 2);
  }
  if (windowed && flash_kernel(q, options)) {
    auto out = at::_flash_attention_forward(q.transpose(1, 2).contiguous(), k_in.transpose(1, 2).contiguous(),
                                            v_in.transpose(1, 2).contiguous(), std::nullopt, std::nullopt, length,
                                            length, 0.0, /*is_causal=*/true, /*return_debug_mask=*/false, scale,
                                            options.window - 1, 0);
    return std::get<0>(out).transpose(1, 2);
  }
  torch::Tensor k = k_in, v = v_in;
  // enable_gqa lets each group of heads / kv_heads query heads share one key/value head without
  // materializing repeated keys and values. Under deterministic kernels (run.deterministic) the keys
  // and values are repeated instead: attention with grouped heads may pick a kernel that accumulates
  // with atomics, plain attention has a deterministic one.
  bool grouped = kv_heads != heads;
  if (grouped && at::globalContext().deterministicAlgorithms()) {
    k = repeat_kv(k, heads);
    v = repeat_kv(v, heads);
    grouped = false;
  }
  std::optional<torch::Tensor> mask;
  if (packed || windowed) mask = visible(q, options, windowed ? options.window : 0);
  return at::scaled_dot_product_attention(q, k, v, mask, options.dropout, /*is_causal=*/!mask, scale,
                                          /*enable_gqa=*/grouped);
}

}  // namespace zf
