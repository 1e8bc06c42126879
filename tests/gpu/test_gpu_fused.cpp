// The fused step on a GPU: the decoder layer's fused kernels (core/model/fused_ops.hpp) against
// libtorch's composed ops, forward and backward, in float32 (to its rounding) and bf16 (within bf16
// rounding); the fused loss (core/model/fused_loss.hpp) against the whole logits' cross-entropy in
// bf16; a bf16 model's loss and gradients with model.fused on and off; and the memory the fused loss
// never allocates at Qwen2-1.5B's head.
#include "gpu_skip.hpp"

#include "config/config.hpp"
#include "model/fused_loss.hpp"
#include "model/fused_ops.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "runtime/device.hpp"

#include <catch2/catch.hpp>

#include <map>

using namespace zf;

namespace {

double gap(const torch::Tensor &got, const torch::Tensor &want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got.to(torch::kFloat32) - want.to(torch::kFloat32)).abs().max().item<double>() / scale;
}

// Runs `op` on fresh leaves of `inputs` (fused or not) with the upstream gradients `upstream`;
// returns the outputs then the inputs' gradients, in float32.
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

// Every tensor of the fused run within `tolerance` (of the largest value) of the composed run's,
// and the fused run through the fused kernel whose autograd node is named `kernel`.
template <class Op>
void check_fused(const std::vector<torch::Tensor> &inputs, const std::vector<torch::Tensor> &upstream, Op op,
                 const std::string &kernel, double tolerance) {
  std::string node;
  std::vector<torch::Tensor> composed = outputs_and_grads(inputs, upstream, [&](auto &x) { return op(x, false); }, nullptr);
  std::vector<torch::Tensor> fused = outputs_and_grads(inputs, upstream, [&](auto &x) { return op(x, true); }, &node);
  CHECK(node.find(kernel) != std::string::npos);
  for (size_t i = 0; i < fused.size(); ++i) {
    INFO("tensor " << i << " (outputs, then the inputs' gradients): " << kernel);
    CHECK(gap(fused[i], composed[i]) <= tolerance);
  }
}

double tolerance_of(torch::Dtype dtype) { return dtype == torch::kFloat32 ? 2e-5 : 0.02; }

}  // namespace

TEST_CASE("fused kernels: RMSNorm with and without the residual add, each weight mode, equals the composed ops",
          "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const NormWeight mode = GENERATE(NormWeight::cast_then_scale, NormWeight::scale_then_cast, NormWeight::one_plus);
  INFO("dtype " << c10::toString(dtype) << ", mode " << int(mode));
  torch::manual_seed(11);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  torch::Tensor x = torch::randn({3, 70, 1536}, options) * 3, branch = torch::randn({3, 70, 1536}, options);
  torch::Tensor weight = (torch::randn({1536}, options) * 0.3 + (mode == NormWeight::one_plus ? 0.0 : 1.0));
  torch::Tensor dy = torch::randn({3, 70, 1536}, options), dsum = torch::randn({3, 70, 1536}, options);
  check_fused({x, weight}, {dy}, [&](std::vector<torch::Tensor> &in, bool fused) {
    return std::vector<torch::Tensor>{rms_norm(in[0], in[1], mode, 1e-6, fused ? Fused::gpu : Fused::off)};
  }, "FusedRmsNorm", tolerance_of(dtype));
  check_fused({x, branch, weight}, {dsum, dy}, [&](std::vector<torch::Tensor> &in, bool fused) {
    auto [sum, normed] = add_rms_norm(in[0], in[1], in[2], mode, 1e-6, fused ? Fused::gpu : Fused::off);
    return std::vector<torch::Tensor>{sum, normed};
  }, "FusedRmsNorm", tolerance_of(dtype));
  // A per-head norm (Qwen3's q_norm): rows of 128 channels.
  torch::Tensor heads = torch::randn({2, 33, 12, 128}, options), head_weight = torch::randn({128}, options);
  check_fused({heads, head_weight}, {torch::randn_like(heads)}, [&](std::vector<torch::Tensor> &in, bool fused) {
    return std::vector<torch::Tensor>{rms_norm(in[0], in[1], mode, 1e-6, fused ? Fused::gpu : Fused::off)};
  }, "FusedRmsNorm", tolerance_of(dtype));
}

TEST_CASE("fused kernels: SwiGLU and GeGLU, and RoPE over whole and partial heads, equal the composed ops",
          "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  INFO("dtype " << c10::toString(dtype));
  torch::manual_seed(12);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  for (bool gelu : {false, true}) {
    INFO("gelu " << gelu);
    torch::Tensor gate = torch::randn({2, 50, 700}, options) * 2, up = torch::randn({2, 50, 700}, options);
    check_fused({gate, up}, {torch::randn_like(gate)}, [&](std::vector<torch::Tensor> &in, bool fused) {
      return std::vector<torch::Tensor>{gated_activation(in[0], in[1], gelu, fused ? Fused::gpu : Fused::off)};
    }, "FusedGlu", tolerance_of(dtype));
    // The halves of one projection (Phi-3's gate_up_proj): views with a row stride of twice their width.
    torch::Tensor both = torch::randn({2, 50, 1400}, options);
    check_fused({both}, {torch::randn({2, 50, 700}, options)}, [&](std::vector<torch::Tensor> &in, bool fused) {
      std::vector<torch::Tensor> halves = in[0].chunk(2, -1);
      return std::vector<torch::Tensor>{gated_activation(halves[0], halves[1], gelu, fused ? Fused::gpu : Fused::off)};
    }, "FusedGlu", tolerance_of(dtype));
  }
  for (double partial : {1.0, 0.5}) {
    INFO("rotated fraction " << partial);
    const int64_t length = 90, head_dim = 128, rotated = int64_t(head_dim * partial);
    RopeSpec spec;
    spec.theta = 1e6;
    RopeTables tables = rope_tables(spec, rotated, 4096, length, torch::empty({0}, options));
    // q as the layer has it: [B, T, heads, d] from a projection, transposed to [B, heads, T, d].
    torch::Tensor q = torch::randn({2, length, 12, head_dim}, options);
    check_fused({q}, {torch::randn({2, 12, length, head_dim}, options)}, [&](std::vector<torch::Tensor> &in, bool fused) {
      return std::vector<torch::Tensor>{rotate(in[0].transpose(1, 2), tables, fused ? Fused::gpu : Fused::off)};
    }, "FusedRope", tolerance_of(dtype));
  }
}

TEST_CASE("fused loss on the GPU: bf16 within bf16 rounding of the whole logits' loss and gradients, float32 to "
          "its rounding", "[gpu][model][fused]") {
  test::require_gpus(1);
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const double softcap = GENERATE(0.0, 30.0);
  INFO("dtype " << c10::toString(dtype) << ", softcap " << softcap);
  torch::manual_seed(13);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(dtype);
  const int64_t rows = 1000, hidden = 256, vocab = 30011;
  torch::Tensor x = torch::randn({rows, hidden}, options), w = torch::randn({vocab, hidden}, options) * 0.05;
  torch::Tensor targets = torch::randint(vocab, {rows}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kLong));
  targets.index_put_({torch::indexing::Slice(0, torch::indexing::None, 7)}, kIgnoreIndex);
  const LogitsTransform transform{1, softcap};
  auto whole = [&](std::vector<torch::Tensor> &in) {
    torch::Tensor logits = output_logits(in[0], in[1], transform).to(torch::kFloat32);
    namespace F = torch::nn::functional;
    torch::Tensor total = F::cross_entropy(logits, targets, F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
    return std::vector<torch::Tensor>{total / targets.ne(kIgnoreIndex).sum().to(torch::kFloat32)};
  };
  auto fused = [&](std::vector<torch::Tensor> &in) {  // 4 MiB chunks: 34 of the rows, 1048 entries of the vocabulary
    return std::vector<torch::Tensor>{fused_linear_cross_entropy(in[0], in[1], targets, transform, int64_t(4) << 20)};
  };
  torch::Tensor one = torch::ones({}, torch::TensorOptions().device(torch::kCUDA));
  std::vector<torch::Tensor> want = outputs_and_grads({x, w}, {one}, whole, nullptr);
  std::vector<torch::Tensor> got = outputs_and_grads({x, w}, {one}, fused, nullptr);
  const bool bf16 = dtype == torch::kBFloat16;
  CHECK(std::abs(got[0].item<double>() / want[0].item<double>() - 1) <= (bf16 ? 1e-3 : 1e-6));
  CHECK(gap(got[1], want[1]) <= (bf16 ? 0.02 : 1e-5));
  CHECK(gap(got[2], want[2]) <= (bf16 ? 0.02 : 1e-5));
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
    CHECK(gap(fused[name], grad) <= 0.05);
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
