// train.grad_accum_dtype = "float32": the micro-steps' bf16 gradients add up in an fp32 sum, which
// is what the stage reduces and the optimizer reads (no rounding back to bf16). Oracles: the same
// gradients summed in fp32 in the same order (bit for bit), and their exact sum in fp64, which
// the fp32 sum is far closer to than bf16 accumulation (what "auto" does) at 32 micro-steps.
#include "engine/grad_accumulation.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("fp32 gradient accumulation gives the fp32 sum of the micro-steps' bf16 gradients, closer to the fp64 sum "
          "than bf16 accumulation at 32 micro-steps", "[train]") {
  // A bf16 model's gradients: a bf16 linear layer's weight (block "first") and bias (block
  // "second"), backward through (x W + b)^2 on 32 micro-batches of random inputs.
  const zf_block blocks[2] = {{"first", 0, 64, 0, 1}, {"second", 64, 8, 1, 1}};
  zf_layout layout{sizeof(zf_layout), 0, nullptr, 2, 0, blocks, 72, 1};
  torch::manual_seed(7);
  torch::Tensor grads = torch::zeros({72}, torch::kBFloat16);
  torch::Tensor weight = torch::randn({8, 8}).to(torch::kBFloat16).requires_grad_(true);
  torch::Tensor bias = torch::randn({8}).to(torch::kBFloat16).requires_grad_(true);
  weight.mutable_grad() = grads.narrow(0, 0, 64).view({8, 8});
  bias.mutable_grad() = grads.narrow(0, 64, 8);
  Fp32GradAccumulation accumulation(grads, layout, torch::full({72}, 3.0f));  // last step's sum: replaced
  const int micro_steps = 32;
  torch::Tensor oracle = torch::zeros({72}, torch::kFloat32), in_bf16 = torch::zeros({72}, torch::kBFloat16);
  torch::Tensor exact = torch::zeros({72}, torch::kFloat64);
  for (int step = 0; step < 2; ++step) {  // the sum starts again at each step
    oracle.zero_(), in_bf16.zero_(), exact.zero_();
    for (int i = 0; i < micro_steps; ++i) {
      torch::Tensor x = (torch::randn({4, 8}) * (i == 0 ? 16.0 : 1.0)).to(torch::kBFloat16);  // one large micro-batch
      (torch::matmul(x, weight) + bias).pow(2).sum().backward();  // into the bf16 gradients (zeros)
      const torch::Tensor micro = grads.clone();  // this micro-step's bf16 gradients
      oracle.add_(micro.to(torch::kFloat32)), in_bf16.add_(micro), exact.add_(micro.to(torch::kFloat64));
      const bool last = i + 1 == micro_steps;
      if (last) accumulation.fold_block(1, i == 0);  // the bias's backward ends first
      accumulation.micro_step_done(i == 0, last);
      CHECK(grads.abs().sum().item<double>() == 0);  // the bf16 gradients are in the sum
    }
    CHECK(torch::equal(accumulation.sum(), oracle));
    const double error_fp32 = (accumulation.sum().to(torch::kFloat64) - exact).abs().max().item<double>();
    const double error_bf16 = (in_bf16.to(torch::kFloat64) - exact).abs().max().item<double>();
    INFO("fp32 accumulation off by " << error_fp32 << ", bf16 by " << error_bf16);
    CHECK(error_fp32 * 1000 < error_bf16);
  }
}

TEST_CASE("grad_accum_dtype = float32 makes a bf16 model's reduced gradients fp32, and leaves fp32 models alone",
          "[train]") {
  RunConfig bf16 = RunConfig::parse("[train]\ngrad_accum_dtype = \"float32\"\n", "t.toml");
  CHECK(reduced_grad_dtype(bf16, torch::kBFloat16) == torch::kFloat32);
  CHECK(reduced_grad_dtype(bf16, torch::kFloat32) == torch::kFloat32);
  RunConfig automatic = RunConfig::parse("", "t.toml");
  CHECK(reduced_grad_dtype(automatic, torch::kBFloat16) == torch::kBFloat16);
}
