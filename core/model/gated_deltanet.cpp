// The Gated DeltaNet mixer (gated_deltanet.hpp). The delta rule runs over chunks of C positions. Per
// head, with gamma_i the log decay from the chunk's start to its position i, D_ij = exp(gamma_i -
// gamma_j) for j <= i (0 above) and S_c the [dk, dv] state that enters chunk c:
//   - inside a chunk the C sequential updates collapse into one unit lower-triangular system (the UT
//     transform): T = (I + N)^-1 with N = strictly_lower((beta k) k^T * D), u = T (beta v) and
//     w = T (beta k exp(gamma));
//   - the chunk's outputs are o = (q exp(gamma)) S_c + (q k^T * D) (u - w S_c);
//   - the state it passes on is S_{c+1} = M_c S_c + B_c, with K = k exp(gamma_last - gamma),
//     M_c = exp(gamma_last) I - K^T w and B_c = K^T u.
// Everything but the last recurrence is batched over all chunks, so autograd records a fixed number
// of ops whatever the length. T comes from a blockwise inversion by matmuls, exact to fp32 rounding
// like a triangular solve (the doubling product (I - N)(I + N^2)(I + N^4)... is not: with nearly equal keys the powers
// of N grow like binomial coefficients and fp32 loses every digit). The recurrence costs one batched
// matmul per chunk forward and one backward (ChunkStates). The formulas are transformers'
// (torch_chunk_gated_delta_rule, the reference the fixtures are built with), regrouped, so fp32
// results agree to rounding.
#include "model/gated_deltanet.hpp"

#include "runtime/error.hpp"

#include <vector>

namespace zf {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor l2_normalised(const torch::Tensor &x) {  // eps 1e-6 inside the root, as FLA and transformers
  return x * torch::rsqrt((x * x).sum(-1, /*keepdim=*/true) + 1e-6);
}

// The [..., size / block, block, block] view of the diagonal blocks of x [..., size, size].
torch::Tensor diagonal_blocks(const torch::Tensor &x, int64_t block) {
  const int64_t size = x.size(-1), count = size / block;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end() - 2);
  shape.insert(shape.end(), {count, block, count, block});
  return x.view(shape).diagonal(0, -4, -2).movedim(-1, -3);
}

// (I + N)^-1 for N the strictly lower part of `lower` [..., C, C] (the rest is not read), C a power of
// two. The diagonal blocks of the inverse double in size each round: the inverse of [[A, 0], [L, B]]
// is [[A^-1, 0], [-B^-1 L A^-1, B^-1]]. Backward: d(I + N)^-1 = -T dN T, so dN = strictly_lower(-T^T dT T^T).
struct UnitLowerInverse : torch::autograd::Function<UnitLowerInverse> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &lower) {
    const int64_t size = lower.size(-1);
    torch::Tensor inverse = torch::eye(size, lower.options()).expand_as(lower).contiguous();
    const torch::Tensor minus = -lower.contiguous();
    for (int64_t half = 1; half < size; half *= 2) {
      torch::Tensor blocks = diagonal_blocks(inverse, 2 * half);
      torch::Tensor below = diagonal_blocks(minus, 2 * half).narrow(-2, half, half).narrow(-1, 0, half);
      torch::Tensor first = blocks.narrow(-2, 0, half).narrow(-1, 0, half);
      torch::Tensor second = blocks.narrow(-2, half, half).narrow(-1, half, half);
      blocks.narrow(-2, half, half).narrow(-1, 0, half).copy_(torch::matmul(second, torch::matmul(below, first)));
    }
    ctx->save_for_backward({inverse});
    return inverse;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const torch::Tensor transposed = ctx->get_saved_variables()[0].transpose(-1, -2);
    return {(-torch::matmul(transposed, torch::matmul(grads[0], transposed))).tril(-1)};
  }
};

// The states entering each chunk: states[0] = 0, states[c + 1] = transition[c] states[c] + input[c],
// for transition [chunks, batch, dk, dk] and input [chunks, batch, dk, dv]. Backward, with G_c the
// whole gradient of states[c]: G_c = dstates[c] + transition[c]^T G_{c+1} (one reverse loop), then
// dtransition[c] = G_{c+1} states[c]^T and dinput[c] = G_{c+1}, batched (the last chunk's are 0).
struct ChunkStates : torch::autograd::Function<ChunkStates> {
  static torch::Tensor forward(AutogradContext *ctx, const torch::Tensor &transition_in,
                               const torch::Tensor &input_in) {
    const torch::Tensor transition = transition_in.contiguous(), input = input_in.contiguous();
    const int64_t chunks = input.size(0);
    torch::Tensor states = torch::empty_like(input);
    states[0].zero_();
    for (int64_t c = 0; c + 1 < chunks; ++c) {
      torch::Tensor next = states[c + 1];
      torch::baddbmm_out(next, input[c], transition[c], states[c]);
    }
    ctx->save_for_backward({transition, states});
    return states;
  }

  static variable_list backward(AutogradContext *ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &transition = saved[0], &states = saved[1];
    const torch::Tensor grad = grads[0].contiguous();
    const int64_t chunks = states.size(0);
    torch::Tensor total = torch::empty_like(states);
    total[chunks - 1].copy_(grad[chunks - 1]);
    for (int64_t c = chunks - 2; c >= 0; --c) {
      torch::Tensor here = total[c];
      torch::baddbmm_out(here, grad[c], transition[c].transpose(-1, -2), total[c + 1]);
    }
    torch::Tensor dtransition = torch::zeros_like(transition), dinput = torch::zeros_like(states);
    const torch::Tensor next = total.narrow(0, 1, chunks - 1);
    dtransition.narrow(0, 0, chunks - 1).copy_(torch::matmul(next, states.narrow(0, 0, chunks - 1).transpose(-1, -2)));
    dinput.narrow(0, 0, chunks - 1).copy_(next);
    return {dtransition, dinput};
  }
};

// ChunkStates over [B, H, chunks, dk, d] tensors: the chunks go first for the loop, and come back.
torch::Tensor chunk_states(const torch::Tensor &transition, const torch::Tensor &input) {
  auto chunks_first = [](const torch::Tensor &t) {
    return t.permute({2, 0, 1, 3, 4}).reshape({t.size(2), t.size(0) * t.size(1), t.size(3), t.size(4)});
  };
  torch::Tensor states = ChunkStates::apply(chunks_first(transition), chunks_first(input));
  return states.reshape({input.size(2), input.size(0), input.size(1), input.size(3), input.size(4)})
      .permute({1, 2, 0, 3, 4});
}

// The decays of each chunk, from the log decays g [B, H, chunks, C] (gamma: their sums from the
// chunk's start) and, for packed documents, segment [B, 1, chunks, C] (undefined: none).
struct ChunkDecays {
  torch::Tensor inside;      // [B, H, chunks, C, C]: exp(gamma_i - gamma_j) for j <= i, else 0
  torch::Tensor from_start;  // [B, H, chunks, C]: exp(gamma_i)
  torch::Tensor to_end;      // [B, H, chunks, C]: exp(gamma_last - gamma_i)
  torch::Tensor whole;       // [B, H, chunks, 1]: exp(gamma_last)
};

// Documents inside a chunk: `segment` counts the starts up to each position in its chunk, and
// segment 0 continues the state the chunk receives. Only positions of one segment see each other; a
// later segment sees none of the received state, and only the last segment writes the state the
// chunk passes on (as if the state were reset to 0 at each start).
ChunkDecays chunk_decays(const torch::Tensor &g, const torch::Tensor &segment) {
  const int64_t chunk = g.size(-1);
  torch::Tensor gamma = g.cumsum(-1);
  torch::Tensor above = torch::ones({chunk, chunk}, g.options().dtype(torch::kBool)).triu(1);
  torch::Tensor last = gamma.narrow(-1, chunk - 1, 1);
  ChunkDecays d{(gamma.unsqueeze(-1) - gamma.unsqueeze(-2)).masked_fill(above, -INFINITY).exp(), gamma.exp(),
                (last - gamma).exp(), last.exp()};
  if (!segment.defined()) return d;
  torch::Tensor last_segment = segment.narrow(-1, chunk - 1, 1);
  d.inside = d.inside.masked_fill(segment.unsqueeze(-1).ne(segment.unsqueeze(-2)), 0);
  d.from_start = d.from_start.masked_fill(segment.ne(0), 0);
  d.to_end = d.to_end.masked_fill(segment.ne(last_segment), 0);
  d.whole = d.whole.masked_fill(last_segment.ne(0), 0);
  return d;
}

}  // namespace

torch::Tensor chunk_gated_delta_rule(const torch::Tensor &q_in, const torch::Tensor &k_in, const torch::Tensor &v_in,
                                     const torch::Tensor &g_in, const torch::Tensor &beta_in, int64_t chunk,
                                     const torch::Tensor &starts) {
  const int64_t batch = q_in.size(0), length = q_in.size(1), heads = v_in.size(2), dk = q_in.size(3),
                dv = v_in.size(3);
  ZF_REQUIRE(chunk > 0 && (chunk & (chunk - 1)) == 0 && k_in.sizes() == q_in.sizes() && q_in.size(2) == heads,
             "internal: chunk_gated_delta_rule's shapes (the chunk a power of two)");
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
  torch::Tensor segment;  // see chunk_decays
  if (starts.defined())
    segment = heads_first(starts.to(torch::kFloat32).unsqueeze(-1)).reshape({batch, 1, chunks, chunk}).cumsum(-1);
  const ChunkDecays decay = chunk_decays(g.reshape({batch, heads, chunks, chunk}), segment);
  // The UT transform, for all chunks at once.
  torch::Tensor inverse = UnitLowerInverse::apply(torch::matmul(k_beta, k.transpose(-1, -2)) * decay.inside);
  torch::Tensor u = torch::matmul(inverse, v_beta);
  torch::Tensor w = torch::matmul(inverse, k_beta * decay.from_start.unsqueeze(-1));
  // The state recurrence S_{c+1} = M_c S_c + B_c.
  torch::Tensor k_to_end_t = (k * decay.to_end.unsqueeze(-1)).transpose(-1, -2);  // [B, H, chunks, dk, C]
  torch::Tensor transition = torch::matmul(-k_to_end_t, w);
  transition.diagonal(0, -2, -1).add_(decay.whole);
  torch::Tensor states = chunk_states(transition, torch::matmul(k_to_end_t, u));
  // The outputs: what the received state gives, and causal attention inside the chunk over what the
  // state does not predict.
  torch::Tensor fresh = u - torch::matmul(w, states);
  torch::Tensor within = torch::matmul(q, k.transpose(-1, -2)) * decay.inside;
  torch::Tensor out = torch::matmul(q * decay.from_start.unsqueeze(-1), states) + torch::matmul(within, fresh);
  return out.reshape({batch, heads, padded, dv}).narrow(2, 0, length).transpose(1, 2);
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
