// The attention kernel of a GPU run (model.attention, core/engine/attention_choice.hpp): each of
// libtorch's kernels that takes the call computes the math kernel's attention, forward and backward,
// within bf16 rounding; the kernel put first is the one SDPA runs; a run logs the times and its choice,
// and a kernel that cannot take the model's attention is refused, naming the key.
#include "gpu_skip.hpp"

#include "engine/attention_choice.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

namespace {

// SDPA's output and q's gradient for a fixed bf16 call, with only `kernel` enabled.
std::pair<torch::Tensor, torch::Tensor> attention(const std::string &kernel) {
  torch::manual_seed(5);
  auto options = torch::TensorOptions().dtype(torch::kBFloat16).device(torch::kCUDA);
  torch::Tensor q = torch::randn({2, 8, 256, 128}, options).requires_grad_();
  torch::Tensor k = torch::randn({2, 2, 256, 128}, options), v = torch::randn({2, 2, 256, 128}, options);
  put_attention_kernel_first(kernel);
  torch::Tensor out = at::scaled_dot_product_attention(q, k, v, std::nullopt, 0.0, true, std::nullopt, true);
  out.sum().backward();
  put_attention_kernel_first("flash");
  return {out.detach().to(torch::kFloat32), q.grad().to(torch::kFloat32)};
}

}  // namespace

TEST_CASE("attention kernels on the GPU: each that runs a grouped bf16 call computes the math kernel's attention",
          "[gpu][model][attention]") {
  test::require_gpus(1);
  const std::vector<KernelTime> times =
      time_attention_kernels({2, 8, 2, 256, 128, torch::kBFloat16}, {"cudnn", "flash", "efficient", "math"});
  REQUIRE(times.size() == 4);
  for (const KernelTime &t : times) INFO(t.kernel << " " << t.ms << " ms");
  CHECK(times[3].ms > 0);  // math takes every call
  auto [want_out, want_grad] = attention("math");
  int ran = 0;
  for (const KernelTime &t : times) {
    if (t.ms < 0 || t.kernel == "math") continue;
    ++ran;
    auto [out, grad] = attention(t.kernel);
    INFO(t.kernel);
    CHECK((out - want_out).abs().max().item<double>() < 0.02 * want_out.abs().max().item<double>());
    CHECK((grad - want_grad).abs().max().item<double>() < 0.02 * want_grad.abs().max().item<double>());
  }
  CHECK(ran >= 1);  // flash or efficient takes a causal bf16 call of head size 128 on any recent GPU
}

TEST_CASE("a GPU run logs its attention kernels' times and choice, and a forced kernel that cannot run is refused",
          "[gpu][model][attention]") {
  test::require_gpus(1);
  const std::string dir = test::scratch_dir("gpu_attention_choice");
  const std::string run = test::zfcore() + " run " + test::source_dir() + "/tests/gpu/tiny_gpt.toml --set run.device=cuda"
                          " --set optimizer.plugin=gpu_adam --set run.progress=off --set train.steps=2 --set "
                          "model.dtype=bfloat16 --set run.output_dir=";
  test::Outcome chosen = test::run_command(run + dir + "/auto");
  INFO(chosen.output);
  REQUIRE(chosen.exit_code == 0);
  CHECK_THAT(chosen.output, Catch::Contains("attention: ") && Catch::Contains("first in SDPA's order (the fastest, "
                                                                              "measured)"));
  // float32 attention: flash takes bf16 and fp16 only.
  test::Outcome refused = test::run_command(run + dir + "/flash32 --set model.dtype=float32 --set model.attention=flash");
  INFO(refused.output);
  CHECK(refused.exit_code != 0);
  CHECK_THAT(refused.output, Catch::Contains("model.attention = \"flash\"") && Catch::Contains("\"auto\" picks"));
}
