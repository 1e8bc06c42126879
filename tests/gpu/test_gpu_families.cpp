// The families on a GPU: each fixture of tests/fixtures/families computes transformers' loss and
// gradients there as on the CPU (fp32), and a sliding window shorter than the sequence, which goes to
// FlashAttention's window in bf16, computes what the masked attention computes (forward and backward).
#include "gpu_skip.hpp"

#include "config/config.hpp"
#include "model/attention.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("every family computes transformers' loss and gradients on the GPU", "[gpu][model]") {
  test::require_gpus(1);
  const std::string name = GENERATE("gemma3", "granite", "llama3", "ministral3", "mistral", "mixtral", "olmo2", "olmo3",
                                    "olmoe", "phi3", "qwen3", "qwen3_5", "qwen3_moe", "smollm3", "qwen3_5_moe", "gpt_oss");
  INFO(name);
  const std::string dir = test::source_dir() + "/tests/fixtures/families/" + name;
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "gpu.toml"));
  model->train(false);
  for (const ModelParameter &p : model->parameters()) p.tensor.set_data(p.tensor.detach().to(torch::kCUDA));
  SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  Batch batch = test::next_token_batch(expected.load("input_ids").to(torch::kCUDA));
  batch.targets = batch.targets.to(torch::kCUDA);
  torch::Tensor loss = model->loss(test::run_blocks(*model, batch), batch);
  const double want = expected.load("loss").item<double>();
  CHECK(std::abs(loss.item<double>() - want) <= 1e-4 * std::abs(want));
  loss.backward();
  for (const ModelParameter &p : model->parameters()) {
    INFO(p.name);
    torch::Tensor want_grad = expected.load("grad." + p.name);
    const double scale = std::max(want_grad.abs().max().item<double>(), 1e-12);
    CHECK((p.tensor.grad().cpu() - want_grad).abs().max().item<double>() <= 1e-3 * scale);
  }
}

TEST_CASE("a bf16 sliding window on the GPU (FlashAttention's window) is the masked attention", "[gpu][model]") {
  test::require_gpus(1);
  torch::manual_seed(5);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  torch::Tensor q = torch::randn({2, 8, 300, 64}, options), k = torch::randn({2, 2, 300, 64}, options),
                v = torch::randn({2, 2, 300, 64}, options), out_grad = torch::randn({2, 8, 300, 64}, options);
  AttentionOptions window;
  window.window = 37;
  auto run = [&](torch::Dtype dtype) {
    std::vector<torch::Tensor> inputs;  // fresh leaves of this dtype
    for (const torch::Tensor &t : {q, k, v}) inputs.push_back(t.to(dtype).detach().requires_grad_());
    torch::Tensor out = causal_attention(inputs[0], inputs[1], inputs[2], window);
    out.backward(out_grad.to(dtype));
    return std::vector<torch::Tensor>{out.to(torch::kFloat32), inputs[0].grad().to(torch::kFloat32), inputs[1].grad().to(torch::kFloat32),
                                      inputs[2].grad().to(torch::kFloat32)};
  };
  std::vector<torch::Tensor> exact = run(torch::kFloat32), flash = run(torch::kBFloat16);  // fp32: the mask
  for (size_t i = 0; i < exact.size(); ++i) {
    INFO("tensor " << i << " (out, dq, dk, dv)");
    const double scale = exact[i].abs().max().item<double>();
    CHECK((flash[i] - exact[i]).abs().max().item<double>() <= 0.03 * scale);
  }
  // The window matters: full causal attention is farther from it than bf16 rounding.
  AttentionOptions full;
  torch::Tensor causal = causal_attention(q, k, v, full);
  CHECK((causal - exact[0]).abs().max().item<double>() > 0.1 * exact[0].abs().max().item<double>());
}
