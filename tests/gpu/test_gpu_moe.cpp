// The mixture-of-experts MLP on the GPU (core/model/moe.hpp): in bf16 the experts run as grouped GEMMs
// (at::_grouped_mm) over the tokens sorted by expert on the device; that computes what the loop over
// experts computes, output and gradients. A hidden micro-benchmark ([.moe-bench], tools/device-families.sh
// runs it) times forward + backward of one OLMoE-1B-7B-shaped MoE layer against a dense SwiGLU MLP doing
// the same FLOPs (width top_k x the experts' width), the 1.3x target.
#include "gpu_skip.hpp"

#include "model/moe.hpp"
#include "support/moe_layer.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <functional>
#include <cstdio>

using namespace zf;

namespace {

using Layer = test::MoeLayer;

Layer cuda_layer(int64_t experts, int64_t k, int64_t h, int64_t inner) {
  return test::random_moe_layer(experts, k, true, h, inner, 0.05, 0.05,
                                torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16));
}

double relative(const torch::Tensor &a, const torch::Tensor &b) {
  return ((a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max() /
          b.to(torch::kFloat32).abs().max().clamp_min(1e-12)).item<double>();
}

}  // namespace

TEST_CASE("moe on the GPU: bf16 grouped GEMMs compute the loop over experts, forward and backward", "[gpu][model][moe]") {
  test::require_gpus(1);
  torch::manual_seed(5);
  Layer l = cuda_layer(8, 2, 256, 512);
  torch::Tensor x = torch::randn({4, 128, 256}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16))
                        .requires_grad_();
  torch::Tensor seed = torch::randn_like(x);
  REQUIRE(moe_grouped_by_default(x, l.spec));
  std::vector<torch::Tensor> inputs = l.all();
  inputs.push_back(x);
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<torch::Tensor> outputs;
  for (bool grouped : {false, true}) {
    torch::Tensor y = moe_mlp(l.spec, l.w, x, nullptr, 0, grouped);
    outputs.push_back(y.detach());
    grads.push_back(torch::autograd::grad({y}, inputs, {seed}));
  }
  CHECK(relative(outputs[1], outputs[0]) < 2e-2);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("tensor " << i);
    CHECK(relative(grads[1][i], grads[0][i]) < 3e-2);
  }
}

TEST_CASE("moe micro-benchmark: one MoE layer's forward + backward against a dense MLP of the same FLOPs",
          "[gpu][.moe-bench]") {
  test::require_gpus(1);
  // OLMoE-1B-7B: hidden 2048, 64 experts of width 1024, 8 per token; 8 x 512 tokens.
  const int64_t h = 2048, inner = 1024, experts = 64, k = 8, tokens = 8 * 512;
  torch::manual_seed(6);
  Layer l = cuda_layer(experts, k, h, inner);
  const auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::Tensor x = torch::randn({tokens, h}, options).requires_grad_();
  torch::Tensor gate = (torch::randn({k * inner, h}, options) * 0.02).requires_grad_();
  torch::Tensor up = (torch::randn({k * inner, h}, options) * 0.02).requires_grad_();
  torch::Tensor down = (torch::randn({h, k * inner}, options) * 0.02).requires_grad_();
  auto time_ms = [&](const std::function<torch::Tensor()> &forward) {
    for (int i = 0; i < 3; ++i) forward().backward(torch::ones({tokens, h}, options));
    torch::cuda::synchronize();
    const auto start = std::chrono::steady_clock::now();
    const int repeats = 20;
    for (int i = 0; i < repeats; ++i) forward().backward(torch::ones({tokens, h}, options));
    torch::cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() / repeats;
  };
  const double moe_ms = time_ms([&] { return moe_mlp(l.spec, l.w, x, nullptr, 0, true); });
  const double looped_ms = time_ms([&] { return moe_mlp(l.spec, l.w, x, nullptr, 0, false); });
  const double dense_ms =
      time_ms([&] { return torch::linear(torch::silu(torch::linear(x, gate)) * torch::linear(x, up), down); });
  const double flops = 6.0 * 3 * double(tokens) * double(h) * double(k * inner);
  std::printf("moe-bench: %lld tokens, hidden %lld, %lld experts of %lld, top %lld, bf16, forward + backward\n"
              "moe-bench: grouped %.3f ms (%.0f TFLOP/s), looped %.3f ms, dense SwiGLU of width %lld %.3f ms "
              "(%.0f TFLOP/s); grouped / dense = %.2f (target <= 1.3)\n",
              (long long)tokens, (long long)h, (long long)experts, (long long)inner, (long long)k, moe_ms,
              flops / moe_ms / 1e9, looped_ms, (long long)(k * inner), dense_ms, flops / dense_ms / 1e9,
              moe_ms / dense_ms);
  CHECK(moe_ms > 0);
}
