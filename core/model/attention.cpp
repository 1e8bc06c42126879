// Causal self-attention (attention.hpp). Full causal attention goes to libtorch's SDPA, which picks
// flash or memory-efficient kernels on a GPU. A sliding window that is shorter than the sequence
// goes on a GPU to the flash kernel's window (no mask in memory), elsewhere to SDPA with a boolean
// mask of the band.
#include "model/attention.hpp"

#include <ATen/Context.h>

#include <optional>

namespace zf {
namespace {

// FlashAttention's own entry takes the window; it wants [B, T, heads, d] in fp16 or bf16, on a GPU.
bool flash_window(const torch::Tensor &q, const AttentionOptions &options) {
  return q.is_cuda() && (q.scalar_type() == torch::kBFloat16 || q.scalar_type() == torch::kHalf) &&
         q.size(-1) <= 256 && q.size(-1) % 8 == 0 && !at::globalContext().deterministicAlgorithms() &&
         options.dropout == 0;
}

}  // namespace

torch::Tensor causal_attention(const torch::Tensor &q, const torch::Tensor &k_in, const torch::Tensor &v_in,
                               const AttentionOptions &options) {
  const int64_t batch = q.size(0), heads = q.size(1), length = q.size(2), d = q.size(3), kv_heads = k_in.size(1);
  const bool windowed = options.window > 0 && options.window < length;
  const std::optional<double> scale = options.scale > 0 ? std::optional<double>(options.scale) : std::nullopt;
  if (windowed && flash_window(q, options)) {
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
    auto repeat = [&](const torch::Tensor &t) {
      return t.unsqueeze(2).expand({batch, kv_heads, heads / kv_heads, length, d}).reshape({batch, heads, length, d});
    };
    k = repeat(k);
    v = repeat(v);
    grouped = false;
  }
  std::optional<torch::Tensor> mask;
  if (windowed) {
    torch::Tensor i = torch::arange(length, q.options().dtype(torch::kLong)).unsqueeze(1);
    torch::Tensor j = torch::arange(length, q.options().dtype(torch::kLong)).unsqueeze(0);
    mask = (j <= i).logical_and(j > i - options.window);
  }
  return at::scaled_dot_product_attention(q, k, v, mask, options.dropout, /*is_causal=*/!windowed, scale,
                                          /*enable_gqa=*/grouped);
}

}  // namespace zf
