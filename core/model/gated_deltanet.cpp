// The Gated DeltaNet mixer (gated_deltanet.hpp). The delta rule runs chunk by chunk: inside a chunk
// the sequential updates collapse into one unit lower-triangular solve (the UT transform), across
// chunks a loop carries the [dk, dv] state of each head. The formulas are transformers'
// (torch_chunk_gated_delta_rule, the reference the fixtures are built with), so fp32 results agree
// to rounding.
#include "model/gated_deltanet.hpp"

#include "runtime/error.hpp"

#include <vector>

namespace zf {
namespace {

torch::Tensor l2_normalised(const torch::Tensor &x) {  // eps 1e-6 inside the root, as FLA and transformers
  return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6);
}

}  // namespace

torch::Tensor chunk_gated_delta_rule(const torch::Tensor &q_in, const torch::Tensor &k_in, const torch::Tensor &v_in,
                                     const torch::Tensor &g_in, const torch::Tensor &beta_in, int64_t chunk,
                                     const torch::Tensor &starts) {
  const int64_t batch = q_in.size(0), length = q_in.size(1), heads = v_in.size(2), dk = q_in.size(3),
                dv = v_in.size(3);
  ZF_REQUIRE(chunk > 0 && k_in.sizes() == q_in.sizes() && q_in.size(2) == heads,
             "internal: chunk_gated_delta_rule's shapes");
  // [B, H, T, d] in fp32, the sequence padded to whole chunks (padded positions have k = v = 0 and
  // g = 0: they change neither the state nor the outputs kept).
  const int64_t padded = (length + chunk - 1) / chunk * chunk, pad = padded - length, chunks = padded / chunk;
  auto heads_first = [&](const torch::Tensor &t) {
    torch::Tensor x = t.transpose(1, 2).to(torch::kFloat32);
    return pad == 0 ? x : torch::constant_pad_nd(x, t.dim() == 4 ? std::vector<int64_t>{0, 0, 0, pad}
                                                                 : std::vector<int64_t>{0, pad});
  };
  auto chunked = [&](const torch::Tensor &t) { return t.reshape({batch, heads, chunks, chunk, t.size(-1)}); };
  torch::Tensor q = heads_first(q_in) * (1.0 / std::sqrt(double(dk)));
  torch::Tensor k = heads_first(k_in), v = heads_first(v_in);
  torch::Tensor beta = heads_first(beta_in).unsqueeze(-1), g = heads_first(g_in);
  torch::Tensor k_beta = chunked(k * beta), v_beta = chunked(v * beta);
  q = chunked(q);
  k = chunked(k);
  // gamma[i]: the log decay from the chunk's start to position i; decay[i][j] = exp(gamma_i - gamma_j) for j <= i.
  torch::Tensor gamma = g.reshape({batch, heads, chunks, chunk}).cumsum(-1);
  auto options = q.options().dtype(torch::kBool);
  torch::Tensor above = torch::ones({chunk, chunk}, options).triu(1);
  torch::Tensor decay = (gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(above, -INFINITY).exp();
  torch::Tensor last = gamma.narrow(-1, chunk - 1, 1);  // [B, H, chunks, 1]
  torch::Tensor from_start = gamma.exp(), to_end = (last - gamma).exp(), chunk_decay = last.exp();
  if (starts.defined()) {
    // Documents inside a chunk: a position's segment counts the starts up to it in its chunk, and
    // segment 0 continues the state the chunk receives. Only positions of one segment see each
    // other; a later segment sees none of the received state, and only the last segment writes
    // the state the chunk passes on (as if the state were reset to 0 at each start).
    torch::Tensor segment = heads_first(starts.to(torch::kFloat32).unsqueeze(-1)).reshape({batch, 1, chunks, chunk});
    segment = segment.cumsum(-1);
    torch::Tensor last_segment = segment.narrow(-1, chunk - 1, 1);
    decay = decay.masked_fill(segment.unsqueeze(-1).ne(segment.unsqueeze(-2)), 0);
    from_start = from_start.masked_fill(segment.ne(0), 0);
    to_end = to_end.masked_fill(segment.ne(last_segment), 0);
    chunk_decay = chunk_decay.masked_fill(last_segment.ne(0), 0);
  }
  // The UT transform: (I + strictly_lower(beta k k^T decay)) [u | w] = [beta v | beta k exp(gamma)].
  torch::Tensor system = torch::matmul(k_beta, k.transpose(-1, -2)) * decay;
  torch::Tensor u = torch::linalg_solve_triangular(system, v_beta, /*upper=*/false, /*left=*/true,
                                                   /*unitriangular=*/true);
  torch::Tensor w = torch::linalg_solve_triangular(system, k_beta * from_start.unsqueeze(-1), false, true, true);
  torch::Tensor within = torch::matmul(q, k.transpose(-1, -2)) * decay;  // causal attention inside the chunk
  torch::Tensor q_decayed = q * from_start.unsqueeze(-1);
  torch::Tensor k_to_end = k * to_end.unsqueeze(-1);
  chunk_decay = chunk_decay.unsqueeze(-1);  // [B, H, chunks, 1, 1]
  torch::Tensor state = torch::zeros({batch, heads, dk, dv}, q.options());
  std::vector<torch::Tensor> outputs;
  outputs.reserve(size_t(chunks));
  for (int64_t c = 0; c < chunks; ++c) {
    torch::Tensor fresh = u.select(2, c) - torch::matmul(w.select(2, c), state);  // what the state does not predict
    outputs.push_back(torch::matmul(q_decayed.select(2, c), state) + torch::matmul(within.select(2, c), fresh));
    state = state * chunk_decay.select(2, c) + torch::matmul(k_to_end.select(2, c).transpose(-1, -2), fresh);
  }
  torch::Tensor out = torch::stack(outputs, 2).reshape({batch, heads, padded, dv}).narrow(2, 0, length);
  return out.transpose(1, 2);
}

namespace {

// The causal depthwise convolution over time of x [B, channels, T]: out[t] = sum_s w[kernel-1-s] x[t-s],
// where packed documents (positions) leave out the x[t-s] of an earlier document (s > positions[t]).
torch::Tensor causal_convolution(const torch::Tensor &x, const torch::Tensor &weight, const torch::Tensor &positions) {
  const int64_t length = x.size(-1), kernel = weight.size(-1), channels = weight.size(0);
  if (!positions.defined())  // padded on the left only
    return torch::conv1d(x, weight, {}, /*stride=*/1, /*padding=*/kernel - 1, /*dilation=*/1, /*groups=*/channels)
        .narrow(-1, 0, length);
  torch::Tensor padded = torch::constant_pad_nd(x, {kernel - 1, 0});
  torch::Tensor at = positions.to(x.device()).unsqueeze(1);  // [B, 1, T]
  torch::Tensor out = torch::zeros_like(x);
  for (int64_t s = 0; s < kernel; ++s) {
    torch::Tensor tap = padded.narrow(-1, kernel - 1 - s, length) * weight.select(-1, kernel - 1 - s).view({1, channels, 1});
    out = out + (s == 0 ? tap : tap.masked_fill(at < s, 0));
  }
  return out;
}

}  // namespace

torch::Tensor gated_deltanet(const DeltaNetWeights &w, const torch::Tensor &x, int64_t key_heads, int64_t key_dim,
                             int64_t value_heads, int64_t value_dim, double eps, const torch::Tensor &positions) {
  const int64_t batch = x.size(0), length = x.size(1), keys = key_heads * key_dim, values = value_heads * value_dim;
  // The causal depthwise convolution over time, then SiLU, over [B, channels, T].
  torch::Tensor mixed = torch::linear(x, w.in_proj_qkv).transpose(1, 2);
  mixed = causal_convolution(mixed.to(w.conv1d.scalar_type()), w.conv1d, positions);
  mixed = torch::silu(mixed).to(x.scalar_type()).transpose(1, 2);
  std::vector<torch::Tensor> qkv = mixed.split_with_sizes({keys, keys, values}, -1);
  torch::Tensor q = qkv[0].reshape({batch, length, key_heads, key_dim});
  torch::Tensor k = qkv[1].reshape({batch, length, key_heads, key_dim});
  torch::Tensor v = qkv[2].reshape({batch, length, value_heads, value_dim});
  torch::Tensor beta = torch::sigmoid(torch::linear(x, w.in_proj_b));
  torch::Tensor a = torch::linear(x, w.in_proj_a).to(torch::kFloat32);
  torch::Tensor g = -w.A_log.to(torch::kFloat32).exp() * torch::softplus(a + w.dt_bias.to(torch::kFloat32));
  if (key_heads != value_heads) {  // each q/k head serves value_heads / key_heads consecutive value heads
    q = q.repeat_interleave(value_heads / key_heads, 2);
    k = k.repeat_interleave(value_heads / key_heads, 2);
  }
  q = l2_normalised(q.to(torch::kFloat32));
  k = l2_normalised(k.to(torch::kFloat32));
  torch::Tensor starts = positions.defined() ? positions.to(x.device()).eq(0) : torch::Tensor();
  torch::Tensor core = chunk_gated_delta_rule(q, k, v, g, beta, 64, starts).to(x.scalar_type());
  // The gated RMSNorm of each head: w * (core / rms).to(dtype) * silu(z), the gate in fp32.
  torch::Tensor z = torch::linear(x, w.in_proj_z).reshape({batch, length, value_heads, value_dim});
  torch::Tensor normed = w.norm * at::rms_norm(core.to(torch::kFloat32), {value_dim}, std::nullopt, eps).to(x.scalar_type());
  torch::Tensor gated = (normed * torch::silu(z.to(torch::kFloat32))).to(x.scalar_type());
  return torch::linear(gated.reshape({batch, length, values}), w.out_proj);
}

}  // namespace zf
