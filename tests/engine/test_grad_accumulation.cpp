// train.grad_accum_dtype = "float32": the micro-steps' bf16 gradients add up in fp32 and are rounded
// to bf16 once per step. The oracle: the same gradients summed in fp32 in the same order, then
// rounded; bf16 accumulation (what "auto" does) loses the small ones under a large sum.
#include "engine/grad_accumulation.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("fp32 gradient accumulation gives the fp32 sum of the micro-steps' gradients, rounded to bf16 once",
          "[train]") {
  // Two blocks; a tied weight's later part (added after its block was folded) is not modelled here.
  const zf_block blocks[2] = {{"first", 0, 6, 0, 1}, {"second", 6, 10, 1, 1}};
  zf_layout layout{sizeof(zf_layout), 0, nullptr, 2, 0, blocks, 16, 1};
  torch::Tensor grads = torch::zeros({16}, torch::kBFloat16);
  Fp32GradAccumulation accumulation(grads, layout, torch::zeros({16}, torch::kFloat32));
  torch::manual_seed(7);
  const int micro_steps = 32;
  std::vector<torch::Tensor> micro;  // one large gradient, then many small ones: bf16 sums drop them
  for (int i = 0; i < micro_steps; ++i)
    micro.push_back(((i == 0 ? 256.0 : 1.0) * (torch::rand({16}) + 0.5)).to(torch::kBFloat16));
  torch::Tensor oracle = torch::zeros({16}, torch::kFloat32), in_bf16 = torch::zeros({16}, torch::kBFloat16);
  for (int step = 0; step < 2; ++step) {  // the sum starts again at each step
    for (int i = 0; i < micro_steps; ++i) {
      grads.add_(micro[size_t(i)]);  // what the backward writes
      const bool last = i + 1 == micro_steps;
      if (last) accumulation.fold_block(1);  // the second block's backward ends first
      accumulation.micro_step_done(last);
    }
    oracle.zero_(), in_bf16.zero_();
    for (const torch::Tensor &g : micro) oracle.add_(g), in_bf16.add_(g);
    CHECK(torch::equal(grads, oracle.to(torch::kBFloat16)));
    CHECK_FALSE(torch::equal(grads, in_bf16));  // the bf16 sum has lost the small gradients
    const double error_fp32 = (grads.to(torch::kFloat64) - oracle.to(torch::kFloat64)).abs().max().item<double>();
    const double error_bf16 = (in_bf16.to(torch::kFloat64) - oracle.to(torch::kFloat64)).abs().max().item<double>();
    CHECK(error_fp32 * 4 < error_bf16);
    grads.zero_();  // the update has read them
  }
}
