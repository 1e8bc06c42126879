// The chunked gated delta rule (core/model/gated_deltanet.hpp) against its definition, the
// step-by-step recurrence S_t = exp(g_t) S_{t-1} + beta_t k_t (v_t - exp(g_t) S_{t-1}^T k_t)^T,
// o_t = S_t^T q_t / sqrt(dk): forward and gradients, for any chunk size, a sequence that is not a
// whole number of chunks included; with document starts (packed data), the state taken as 0 at
// each start.
#include "model/gated_deltanet.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace zf;

namespace {

torch::Tensor recurrence(const torch::Tensor &q, const torch::Tensor &k, const torch::Tensor &v, const torch::Tensor &g,
                         const torch::Tensor &beta, const torch::Tensor &starts = torch::Tensor()) {
  const int64_t batch = q.size(0), length = q.size(1), heads = q.size(2), dk = q.size(3), dv = v.size(3);
  torch::Tensor state = torch::zeros({batch, heads, dk, dv}, torch::kFloat64);
  std::vector<torch::Tensor> outputs;
  for (int64_t t = 0; t < length; ++t) {
    torch::Tensor kt = k.select(1, t), vt = v.select(1, t), qt = q.select(1, t) / std::sqrt(double(dk));
    state = state * g.select(1, t).exp().view({batch, heads, 1, 1});
    if (starts.defined()) state = state * (1 - starts.select(1, t).to(torch::kFloat64)).view({batch, 1, 1, 1});
    torch::Tensor predicted = torch::matmul(kt.unsqueeze(-2), state).squeeze(-2);  // S^T k: [B, H, dv]
    torch::Tensor delta = (vt - predicted) * beta.select(1, t).unsqueeze(-1);
    state = state + kt.unsqueeze(-1) * delta.unsqueeze(-2);
    outputs.push_back(torch::matmul(qt.unsqueeze(-2), state).squeeze(-2));
  }
  return torch::stack(outputs, 1);
}

}  // namespace

TEST_CASE("gated delta rule: the chunked form equals the step-by-step recurrence, values and gradients", "[model]") {
  // Without document starts, and with starts inside chunks, at a chunk's first position, on
  // neighbouring positions and at position 0 (packed documents, each from a zero state).
  const bool packed = GENERATE(false, true);
  INFO((packed ? "with" : "without") << " document starts");
  torch::manual_seed(7);
  const int64_t batch = 2, length = 21, heads = 3, dk = 8, dv = 6;
  auto unit = [](torch::Tensor x) { return x / x.norm(2, -1, true); };
  std::vector<torch::Tensor> inputs = {unit(torch::randn({batch, length, heads, dk}, torch::kFloat64)),
                                       unit(torch::randn({batch, length, heads, dk}, torch::kFloat64)),
                                       torch::randn({batch, length, heads, dv}, torch::kFloat64),
                                       -torch::rand({batch, length, heads}, torch::kFloat64),
                                       torch::rand({batch, length, heads}, torch::kFloat64)};
  for (torch::Tensor &x : inputs) x.requires_grad_(true);
  torch::Tensor weights = torch::randn({batch, length, heads, dv}, torch::kFloat64);
  auto gradients = [&](const torch::Tensor &out) {
    return torch::autograd::grad({(out.to(torch::kFloat64) * weights).sum()}, inputs);
  };
  torch::Tensor starts;
  if (packed) {
    starts = torch::zeros({batch, length}, torch::kBool);
    for (int64_t t : {0, 3, 4, 8, 13, 20}) starts[0][t] = true;
    for (int64_t t : {0, 1, 16}) starts[1][t] = true;
  }
  torch::Tensor want = recurrence(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], starts);
  std::vector<torch::Tensor> want_grads = gradients(want);
  for (int64_t chunk : {1, 4, 8, 64}) {
    INFO("chunk " << chunk);
    torch::Tensor got = chunk_gated_delta_rule(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4], chunk, starts);
    CHECK(got.scalar_type() == torch::kFloat32);
    CHECK((got.to(torch::kFloat64) - want).abs().max().item<double>() < 1e-5);
    std::vector<torch::Tensor> got_grads = gradients(got);
    for (size_t i = 0; i < inputs.size(); ++i) {
      INFO("input " << i);
      CHECK((got_grads[i] - want_grads[i]).abs().max().item<double>() < 1e-4 * want_grads[i].abs().max().item<double>() + 1e-6);
    }
  }
}

TEST_CASE("gated delta rule: nearly equal keys written at full strength stay exact in fp32, slow decay or fast",
          "[model]") {
  // The hardest case for the chunk's triangular system: keys almost parallel, beta near 1, decays near
  // 1, so its off-diagonal entries approach 1 and sums over paths through a chunk of 64 grow like
  // binomial coefficients; and decays down to exp(-10) a position, whose products underflow. Inputs
  // in fp32 and rounded to bf16 (the layer's dtype), as the rule reads them.
  torch::manual_seed(11);
  const int64_t batch = 1, length = 128, heads = 2, dk = 16, dv = 8;
  const torch::ScalarType dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const double decay = GENERATE(0.01, 10.0);
  INFO("inputs in " << c10::toString(dtype) << ", log decays down to -" << decay);
  auto unit = [](torch::Tensor x) { return x / x.norm(2, -1, true); };
  torch::Tensor common = torch::randn({batch, 1, heads, dk}, torch::kFloat64);
  std::vector<torch::Tensor> inputs = {
      unit(torch::randn({batch, length, heads, dk}, torch::kFloat64)),
      unit(common + 0.05 * torch::randn({batch, length, heads, dk}, torch::kFloat64)),
      torch::randn({batch, length, heads, dv}, torch::kFloat64),
      -decay * torch::rand({batch, length, heads}, torch::kFloat64),
      0.99 + 0.01 * torch::rand({batch, length, heads}, torch::kFloat64)};
  for (torch::Tensor &x : inputs) x = x.to(dtype).to(torch::kFloat64).requires_grad_(true);
  torch::Tensor weights = torch::randn({batch, length, heads, dv}, torch::kFloat64);
  auto gradients = [&](const torch::Tensor &out) {
    return torch::autograd::grad({(out.to(torch::kFloat64) * weights).sum()}, inputs);
  };
  torch::Tensor want = recurrence(inputs[0], inputs[1], inputs[2], inputs[3], inputs[4]);
  std::vector<torch::Tensor> want_grads = gradients(want);
  std::vector<torch::Tensor> low(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) low[i] = inputs[i].detach().to(dtype).requires_grad_(true);
  torch::Tensor got = chunk_gated_delta_rule(low[0], low[1], low[2], low[3], low[4], 64);
  CHECK((got.to(torch::kFloat64) - want).abs().max().item<double>() < 1e-5 * want.abs().max().item<double>());
  // The gradients of bf16 inputs are bf16: they carry its rounding (2^-9 relative).
  const double gradient_tolerance = dtype == torch::kFloat32 ? 1e-4 : 1e-2;
  std::vector<torch::Tensor> got_grads =
      torch::autograd::grad({(got.to(torch::kFloat64) * weights).sum()}, low);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("input " << i);
    CHECK((got_grads[i].to(torch::kFloat64) - want_grads[i]).abs().max().item<double>() <
          gradient_tolerance * want_grads[i].abs().max().item<double>());
  }
}

TEST_CASE("gated delta rule: the backward records the same ops for 6 chunks as for 22, one loop of its own",
          "[model]") {
  // Autograd over a loop of small ops per chunk is what made the backward slow: the recorded graph
  // must not grow with the sequence (the recurrence across chunks is one node with its own loop).
  auto graph_size = [](int64_t length) {
    const int64_t heads = 2, dk = 8, dv = 4;
    torch::Tensor q = torch::randn({1, length, heads, dk}).requires_grad_(true);
    torch::Tensor k = torch::randn({1, length, heads, dk}).requires_grad_(true);
    torch::Tensor v = torch::randn({1, length, heads, dv}).requires_grad_(true);
    torch::Tensor g = (-torch::rand({1, length, heads})).requires_grad_(true);
    torch::Tensor beta = torch::rand({1, length, heads}).requires_grad_(true);
    torch::Tensor out = chunk_gated_delta_rule(q, k, v, g, beta, 4);
    std::vector<torch::autograd::Node *> pending = {out.grad_fn().get()}, seen;
    while (!pending.empty()) {
      torch::autograd::Node *node = pending.back();
      pending.pop_back();
      if (node == nullptr || std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
      seen.push_back(node);
      for (const torch::autograd::Edge &edge : node->next_edges()) pending.push_back(edge.function.get());
    }
    return seen.size();
  };
  CHECK(graph_size(21) == graph_size(85));
}
