// The chunked gated delta rule (core/model/gated_deltanet.hpp) on the GPU: the same values and
// gradients as on the CPU. A hidden micro-benchmark ([.gdn-bench]) times its forward and forward +
// backward at Qwen3.5's head shape (16 heads x 128, bf16 inputs) beside a causal SDPA layer of the
// same heads, for the targets of the delta rule's kernel work.
#include "gpu_skip.hpp"

#include "model/gated_deltanet.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

using namespace zf;

namespace {

// q, k (unit rows), v, g (log decay), beta of [batch, length, heads, dim], on `options`' device and
// dtype (g in fp32, as the layer passes it), each requiring its gradient.
std::vector<torch::Tensor> rule_inputs(int64_t batch, int64_t length, int64_t heads, int64_t dim,
                                       torch::TensorOptions options) {
  auto unit = [](torch::Tensor x) { return x / x.norm(2, -1, true); };
  std::vector<torch::Tensor> inputs = {unit(torch::randn({batch, length, heads, dim})),
                                       unit(torch::randn({batch, length, heads, dim})),
                                       torch::randn({batch, length, heads, dim}), -torch::rand({batch, length, heads}),
                                       torch::rand({batch, length, heads})};
  for (size_t i = 0; i < inputs.size(); ++i)
    inputs[i] = inputs[i].to(i == 3 ? options.dtype(torch::kFloat32) : options).requires_grad_(true);
  return inputs;
}

double relative(const torch::Tensor &a, const torch::Tensor &b) {
  return ((a.cpu().to(torch::kFloat64) - b.cpu().to(torch::kFloat64)).abs().max() /
          b.cpu().to(torch::kFloat64).abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace

TEST_CASE("gated delta rule on the GPU: the CPU's values and gradients, packed and padded", "[gpu][model]") {
  test::require_gpus(1);
  torch::manual_seed(9);
  const int64_t batch = 2, length = 200, heads = 4, dim = 64;  // 200: not a whole number of chunks
  std::vector<torch::Tensor> cpu = rule_inputs(batch, length, heads, dim, torch::TensorOptions());
  std::vector<torch::Tensor> gpu;
  for (const torch::Tensor &x : cpu) gpu.push_back(x.detach().cuda().requires_grad_(true));
  torch::Tensor starts = torch::zeros({batch, length}, torch::kBool);
  for (int64_t t : {0, 63, 64, 100, 101, 190}) starts[0][t] = true;
  starts[1][0] = true;
  torch::Tensor seed = torch::randn({batch, length, heads, dim});
  auto run = [&](const std::vector<torch::Tensor> &in, const torch::Tensor &where) {
    torch::Tensor out = chunk_gated_delta_rule(in[0], in[1], in[2], in[3], in[4], 64, where);
    std::vector<torch::Tensor> result = torch::autograd::grad({(out * seed.to(out.device())).sum()}, in);
    result.insert(result.begin(), out.detach());
    return result;
  };
  const std::vector<torch::Tensor> want = run(cpu, starts), got = run(gpu, starts.cuda());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO((i == 0 ? "output" : "gradient of input " + std::to_string(i - 1)));
    CHECK(got[i].is_cuda());
    CHECK(relative(got[i], want[i]) < 1e-4);
  }
}

TEST_CASE("gated delta rule micro-benchmark: forward and forward + backward beside causal SDPA", "[gpu][.gdn-bench]") {
  test::require_gpus(1);
  torch::manual_seed(10);
  const int64_t heads = 16, dim = 128;
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  auto time_ms = [](const std::function<void()> &step) {
    for (int i = 0; i < 3; ++i) step();
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    const int repeats = 20;
    for (int i = 0; i < repeats; ++i) step();
    torch::cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / repeats;
  };
  for (auto [batch, length] : {std::pair<int64_t, int64_t>{8, 512}, {1, 8192}}) {
    const std::vector<torch::Tensor> in = rule_inputs(batch, length, heads, dim, options);
    auto rule = [&] { return chunk_gated_delta_rule(in[0], in[1], in[2], in[3], in[4]); };
    // SDPA over [B, H, T, d], the same q, k and v.
    std::vector<torch::Tensor> attention_in;
    for (int i = 0; i < 3; ++i) attention_in.push_back(in[i].detach().transpose(1, 2).requires_grad_(true));
    auto attention = [&] {
      return torch::scaled_dot_product_attention(attention_in[0], attention_in[1], attention_in[2], {}, 0.0, true);
    };
    auto forward_only = [](const std::function<torch::Tensor()> &f) {
      return [f] {
        torch::NoGradGuard no_grad;
        f();
      };
    };
    auto with_backward = [](const std::function<torch::Tensor()> &f) { return [f] { f().sum().backward(); }; };
    const double rule_forward = time_ms(forward_only(rule)), rule_both = time_ms(with_backward(rule));
    const double sdpa_forward = time_ms(forward_only(attention)), sdpa_both = time_ms(with_backward(attention));
    std::printf("gdn-bench: %lld x %lld, %lld heads x %lld, bf16 inputs: delta rule forward %.3f ms, "
                "forward + backward %.3f ms; causal SDPA forward %.3f ms, forward + backward %.3f ms "
                "(the rule / SDPA: %.1fx, %.1fx)\n",
                (long long)batch, (long long)length, (long long)heads, (long long)dim, rule_forward, rule_both,
                sdpa_forward, sdpa_both, rule_forward / sdpa_forward, rule_both / sdpa_both);
    CHECK(rule_both > 0);
  }
}
