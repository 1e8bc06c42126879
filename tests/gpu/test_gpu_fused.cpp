// The fused step on a GPU: the decoder layer's fused kernels (core/model/fused_ops.hpp) against the
// plain formulas, forward and backward, and the fused loss (core/model/fused_loss.hpp) against the
// whole logits' cross-entropy (tests/models/fused_checks.hpp, whose checks the CPU tests run on the
// kernels' host loops), in float32 (to its rounding) and bf16 (within bf16 rounding); a bf16 model's
// loss and gradients with model.fused on and off; and the memory the fused loss never allocates at
// Qwen2-1.5B's head.
#include "gpu_skip.hpp"

#include "config/config.hpp"
#include "model/fused_loss.hpp"
#include "model/fused_ops.hpp"
#include "model/zoo.hpp"
#include "models/fused_checks.hpp"
#include "models/model_fixture.hpp"
#include "runtime/device.hpp"

#include <catch2/catch.hpp>

#include <map>

using namespace zf;

using test::fused_gap;

TEST_CASE("fused kernels: RMSNorm with and without the residual add, each weight mode, equals the plain formulas",
          "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const NormWeight mode = GENERATE(NormWeight::cast_then_scale, NormWeight::scale_then_cast, NormWeight::one_plus);
  INFO("dtype " << c10::toString(dtype) << ", mode " << int(mode));
  test::check_fused_norms(torch::kCUDA, dtype, mode, FusedKernels::gpu);
}

TEST_CASE("fused kernels: SwiGLU and GeGLU, and RoPE over whole and partial heads, equal the plain formulas",
          "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  INFO("dtype " << c10::toString(dtype));
  test::check_fused_glu(torch::kCUDA, dtype, FusedKernels::gpu);
  test::check_fused_rope(torch::kCUDA, dtype, FusedKernels::gpu);
}

TEST_CASE("fused loss on the GPU: bf16 within bf16 rounding of the whole logits' loss and gradients, float32 to "
          "its rounding", "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const double softcap = GENERATE(0.0, 30.0);
  INFO("dtype " << c10::toString(dtype) << ", softcap " << softcap);
  test::check_fused_loss(torch::kCUDA, dtype, softcap, FusedKernels::gpu, 1000, 30011);
}

TEST_CASE("a bf16 model on the GPU: model.fused gives the composed ops' loss and gradients within bf16 rounding",
          "[gpu][model][fused]") {
  test::require_gpus(1);
  const std::string type = GENERATE(as<std::string>(), "qwen2", "qwen3", "gemma3_text", "phi3");
  INFO(type);
  auto run = [&](bool fused) {
    torch::manual_seed(14);
    auto model = make_model(RunConfig::parse("[model]\ntype = \"" + type + "\"\nhidden = 256\nlayers = 2\nheads = 4\n"
                                             "kv_heads = 2\nvocab = 5000\nmax_seq = 256\ndtype = \"bfloat16\"\nfused = " +
                                             (fused ? "true" : "false") + "\n", "fused.toml"));
    for (const ModelParameter &p : model->parameters()) p.tensor.set_data(p.tensor.detach().to(torch::kCUDA));
    torch::manual_seed(15);
    Batch batch = test::next_token_batch(torch::randint(5000, {4, 200}, torch::kLong).to(torch::kCUDA));
    torch::Tensor hidden = batch.inputs;
    for (size_t b = 0; b + 1 < model->block_names().size(); ++b) hidden = model->forward_block(b, hidden, batch);
    torch::Tensor loss = model->forward_loss(hidden, batch);
    loss.backward();
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
    for (const ModelParameter &p : model->parameters()) out[p.name] = p.tensor.grad().to(torch::kFloat32);
    return out;
  };
  std::map<std::string, torch::Tensor> composed = run(false), fused = run(true);
  CHECK(std::abs(fused["loss"].item<double>() / composed["loss"].item<double>() - 1) <= 2e-3);
  for (const auto &[name, grad] : composed) {
    if (name == "loss") continue;
    INFO(name);
    CHECK(fused_gap(fused[name], grad) <= 0.05);
  }
}

// Qwen2-1.5B's head at 8 x 512 tokens, bf16: the whole logits (1.16 GiB), their float32 copy and
// log-softmax (2.32 GiB each) and in the backward their gradients; the fused loss holds one chunk.
TEST_CASE("fused loss on the GPU: Qwen2-1.5B's head at 4096 tokens peaks at least 4 GiB below the whole logits' loss",
          "[gpu][memory][fused]") {
  test::require_gpus(1);
  torch::manual_seed(16);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  torch::Tensor x = torch::randn({4096, 1536}, options), w = torch::randn({151936, 1536}, options) * 0.02;
  torch::Tensor targets = torch::randint(151936, {4096}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  auto peak = [&](bool fused) {
    torch::Tensor xl = x.detach().requires_grad_(true), wl = w.detach().requires_grad_(true);
    torch::cuda::synchronize();
    const uint64_t before = device_memory().allocated;
    reset_device_memory_peak();
    torch::Tensor loss;
    if (fused) {
      loss = fused_linear_cross_entropy(xl, wl, targets, {});
    } else {
      namespace F = torch::nn::functional;
      loss = F::cross_entropy(torch::linear(xl, wl).to(torch::kFloat32), targets);
    }
    loss.backward();
    torch::cuda::synchronize();
    return double(device_memory().allocated_peak - before) / double(1ull << 30);
  };
  const double whole = peak(false), chunked = peak(true);
  INFO("peak above the inputs: whole logits " << whole << " GiB, fused " << chunked << " GiB");
  CHECK(whole - chunked >= 4.0);
}
