// fused_checks.hpp: the fused kernels' autograd functions (core/model/fused_ops.hpp) against the
// plain formulas under torch's autograd, outputs and every input's gradient, on any device: the CPU
// tests run them with FusedKernels::always (the kernels' host loops), the GPU tests with the CUDA kernels.
// Inputs cover the residual branch, the three ways a norm applies its weight, the strided halves of
// one projection, q as its projection lays it out, and a partial rotation.
#pragma once

#include "model/fused_loss.hpp"
#include "model/fused_ops.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace zf::test {

// The largest difference, relative to want's largest value.
inline double fused_gap(const torch::Tensor &got, const torch::Tensor &want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got.to(torch::kFloat32) - want.to(torch::kFloat32)).abs().max().item<double>() / scale;
}

// float32: a few of its ulps; bf16: one rounding of the dtype.
inline double fused_tolerance(torch::Dtype dtype) { return dtype == torch::kFloat32 ? 2e-5 : 0.02; }

// Runs `op` on fresh leaves of `inputs` with the upstream gradients `upstream`; returns the outputs
// then the inputs' gradients, in float32; `node` gets the first output's autograd node.
template <class Op>
std::vector<torch::Tensor> outputs_and_grads(const std::vector<torch::Tensor> &inputs,
                                             const std::vector<torch::Tensor> &upstream, Op op, std::string *node) {
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor &t : inputs) leaves.push_back(t.detach().clone().requires_grad_(true));
  std::vector<torch::Tensor> outs = op(leaves);
  if (node) *node = outs[0].grad_fn()->name();
  torch::autograd::backward(outs, upstream);
  std::vector<torch::Tensor> all;
  for (const torch::Tensor &t : outs) all.push_back(t.detach().to(torch::kFloat32));
  for (const torch::Tensor &t : leaves) all.push_back(t.grad().to(torch::kFloat32));
  return all;
}

// Every tensor of `fused` (whose first output comes from the autograd function named `kernel`) within
// `tolerance` of the plain formula's.
template <class Op, class Plain>
void check_against_plain(const std::vector<torch::Tensor> &inputs, const std::vector<torch::Tensor> &upstream,
                         Op fused, Plain plain, const std::string &kernel, double tolerance) {
  std::string node;
  std::vector<torch::Tensor> want = outputs_and_grads(inputs, upstream, plain, nullptr);
  std::vector<torch::Tensor> got = outputs_and_grads(inputs, upstream, fused, &node);
  INFO(kernel << " ran as " << node);
  CHECK(node.find(kernel) != std::string::npos);
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("tensor " << i << " (the outputs, then the inputs' gradients): gap " << fused_gap(got[i], want[i]));
    CHECK(fused_gap(got[i], want[i]) <= tolerance);
  }
}

// RMSNorm as transformers writes it: normalised in float32, the weight applied as `mode` says.
inline torch::Tensor plain_rms_norm(const torch::Tensor &h, const torch::Tensor &w, NormWeight mode, double eps) {
  const torch::Tensor f = h.to(torch::kFloat32), n = f * torch::rsqrt(f.pow(2).mean(-1, true) + eps);
  if (mode == NormWeight::cast_then_scale) return w * n.to(h.scalar_type());
  if (mode == NormWeight::scale_then_cast) return (w.to(torch::kFloat32) * n).to(h.scalar_type());
  return (n * (1 + w.to(torch::kFloat32))).to(h.scalar_type());
}

// silu(g) * u, or gelu(g) with the tanh approximation * u; the activation rounded to the dtype.
inline torch::Tensor plain_glu(const torch::Tensor &g, const torch::Tensor &u, bool gelu) {
  const torch::Tensor f = g.to(torch::kFloat32);
  const torch::Tensor act = gelu ? 0.5 * f * (1 + torch::tanh(std::sqrt(2 / M_PI) * (f + 0.044715 * f.pow(3))))
                                 : f * torch::sigmoid(f);
  return act.to(g.scalar_type()) * u;
}

// x * cos + rotate_half(x) * sin over the first `rotated` channels (transformers' apply_rotary_pos_emb).
inline torch::Tensor plain_rope(const torch::Tensor &x, const RopeTables &tables) {
  const int64_t rotated = tables.cos.size(-1), half = rotated / 2;
  const torch::Tensor sin = torch::cat({-tables.signed_sin.narrow(-1, 0, half), tables.signed_sin.narrow(-1, half, half)}, -1);
  const torch::Tensor part = x.narrow(-1, 0, rotated);
  const torch::Tensor rotate_half = torch::cat({-part.narrow(-1, half, half), part.narrow(-1, 0, half)}, -1);
  return torch::cat({part * tables.cos + rotate_half * sin, x.narrow(-1, rotated, x.size(-1) - rotated)}, -1);
}

// RMSNorm alone, with the residual add (its sum and its gradient), and over heads (Qwen3's q_norm).
inline void check_fused_norms(torch::Device device, torch::Dtype dtype, NormWeight mode, FusedKernels fused) {
  torch::manual_seed(11);
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const double eps = 1e-6, tolerance = fused_tolerance(dtype);
  torch::Tensor x = torch::randn({2, 37, 1002}, options) * 3, branch = torch::randn({2, 37, 1002}, options);
  torch::Tensor weight = torch::randn({1002}, options) * 0.3 + (mode == NormWeight::one_plus ? 0.0 : 1.0);
  torch::Tensor dy = torch::randn_like(x), dsum = torch::randn_like(x);
  check_against_plain({x, weight}, {dy}, [&](std::vector<torch::Tensor> &in) {
    return std::vector<torch::Tensor>{rms_norm(in[0], in[1], mode, eps, fused)};
  }, [&](std::vector<torch::Tensor> &in) {
    return std::vector<torch::Tensor>{plain_rms_norm(in[0], in[1], mode, eps)};
  }, "FusedRmsNorm", tolerance);
  check_against_plain({x, branch, weight}, {dsum, dy}, [&](std::vector<torch::Tensor> &in) {
    auto [sum, normed] = add_rms_norm(in[0], in[1], in[2], mode, eps, fused);
    return std::vector<torch::Tensor>{sum, normed};
  }, [&](std::vector<torch::Tensor> &in) {
    torch::Tensor sum = in[0] + in[1];
    return std::vector<torch::Tensor>{sum, plain_rms_norm(sum, in[2], mode, eps)};
  }, "FusedRmsNorm", tolerance);
  // Per head, on q as its projection lays it out ([B, T, heads, d], transposed: not contiguous).
  torch::Tensor heads = torch::randn({2, 21, 6, 64}, options), head_weight = torch::randn({64}, options);
  check_against_plain({heads, head_weight}, {torch::randn({2, 6, 21, 64}, options)}, [&](std::vector<torch::Tensor> &in) {
    return std::vector<torch::Tensor>{rms_norm(in[0].transpose(1, 2), in[1], mode, eps, fused)};
  }, [&](std::vector<torch::Tensor> &in) {
    return std::vector<torch::Tensor>{plain_rms_norm(in[0].transpose(1, 2), in[1], mode, eps)};
  }, "FusedRmsNorm", tolerance);
}

// SwiGLU and GeGLU on two tensors and on the halves of one projection (Phi-3's gate_up_proj: views
// whose rows sit twice their width apart).
inline void check_fused_glu(torch::Device device, torch::Dtype dtype, FusedKernels fused) {
  torch::manual_seed(12);
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  for (bool gelu : {false, true}) {
    INFO("gelu " << gelu);
    torch::Tensor gate = torch::randn({2, 25, 702}, options) * 2, up = torch::randn({2, 25, 702}, options);
    check_against_plain({gate, up}, {torch::randn_like(gate)}, [&](std::vector<torch::Tensor> &in) {
      return std::vector<torch::Tensor>{gated_activation(in[0], in[1], gelu, fused)};
    }, [&](std::vector<torch::Tensor> &in) {
      return std::vector<torch::Tensor>{plain_glu(in[0], in[1], gelu)};
    }, "FusedGlu", fused_tolerance(dtype));
    torch::Tensor both = torch::randn({2, 25, 1404}, options) * 2;
    check_against_plain({both}, {torch::randn({2, 25, 702}, options)}, [&](std::vector<torch::Tensor> &in) {
      std::vector<torch::Tensor> halves = in[0].chunk(2, -1);
      return std::vector<torch::Tensor>{gated_activation(halves[0], halves[1], gelu, fused)};
    }, [&](std::vector<torch::Tensor> &in) {
      std::vector<torch::Tensor> halves = in[0].chunk(2, -1);
      return std::vector<torch::Tensor>{plain_glu(halves[0], halves[1], gelu)};
    }, "FusedGlu", fused_tolerance(dtype));
  }
}

// RoPE over whole heads and over half of each (Phi-3's partial_rotary_factor), on q as its
// projection lays it out.
inline void check_fused_rope(torch::Device device, torch::Dtype dtype, FusedKernels fused) {
  torch::manual_seed(13);
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  for (double partial : {1.0, 0.5}) {
    INFO("rotated fraction " << partial);
    const int64_t length = 45, head_dim = 64, rotated = int64_t(head_dim * partial);
    RopeSpec spec;
    spec.theta = 1e4;
    const RopeTables tables = rope_tables(spec, rotated, 4096, length, torch::empty({0}, options));
    torch::Tensor q = torch::randn({2, length, 6, head_dim}, options);
    check_against_plain({q}, {torch::randn({2, 6, length, head_dim}, options)}, [&](std::vector<torch::Tensor> &in) {
      return std::vector<torch::Tensor>{rotate(in[0].transpose(1, 2), tables, fused)};
    }, [&](std::vector<torch::Tensor> &in) {
      return std::vector<torch::Tensor>{plain_rope(in[0].transpose(1, 2), tables)};
    }, "FusedRope", fused_tolerance(dtype));
  }
}

// The fused loss (fused_loss.hpp) in chunks against torch's cross-entropy of the whole logits, some
// targets ignored, with and without a softcap: bf16 within its rounding, float32 to its own.
inline void check_fused_loss(torch::Device device, torch::Dtype dtype, double softcap, FusedKernels fused, int64_t rows,
                             int64_t vocab) {
  torch::manual_seed(16);
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const int64_t hidden = 256;
  torch::Tensor x = torch::randn({rows, hidden}, options), w = torch::randn({vocab, hidden}, options) * 0.05;
  torch::Tensor targets = torch::randint(vocab, {rows}, torch::TensorOptions().device(device).dtype(torch::kLong));
  targets.index_put_({torch::indexing::Slice(0, torch::indexing::None, 7)}, kIgnoreIndex);
  const LogitsTransform transform{1, softcap};
  auto whole = [&](std::vector<torch::Tensor> &in) {
    torch::Tensor logits = output_logits(in[0], in[1], transform).to(torch::kFloat32);
    namespace F = torch::nn::functional;
    torch::Tensor total = F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
    return std::vector<torch::Tensor>{total / targets.ne(kIgnoreIndex).sum().to(torch::kFloat32)};
  };
  auto chunked = [&](std::vector<torch::Tensor> &in) {  // chunks of 1 MiB of float32 logits: several each way
    return std::vector<torch::Tensor>{fused_linear_cross_entropy(in[0], in[1], targets, transform, int64_t(1) << 20, fused)};
  };
  torch::Tensor one = torch::ones({}, torch::TensorOptions().device(device));
  std::vector<torch::Tensor> want = outputs_and_grads({x, w}, {one}, whole, nullptr);
  std::vector<torch::Tensor> got = outputs_and_grads({x, w}, {one}, chunked, nullptr);
  const bool bf16 = dtype == torch::kBFloat16;
  INFO("loss " << got[0].item<double>() << " vs the whole logits' " << want[0].item<double>());
  CHECK(std::abs(got[0].item<double>() / want[0].item<double>() - 1) <= (bf16 ? 1e-3 : 1e-6));
  CHECK(fused_gap(got[1], want[1]) <= (bf16 ? 0.02 : 1e-5));
  CHECK(fused_gap(got[2], want[2]) <= (bf16 ? 0.02 : 1e-5));
}

}  // namespace zf::test
