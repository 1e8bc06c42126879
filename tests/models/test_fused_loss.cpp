// The fused loss (core/model/fused_loss.hpp) against the cross-entropy of the whole logits: in
// float32 on the CPU the same loss and the same gradients to float32's rounding, in chunks of any
// size, by libtorch's ops or the loss kernel's host loops, with ignored targets, a tied head,
// Gemma's final softcap and Granite's logits divisor.
#include "config/config.hpp"
#include "model/fused_loss.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <map>

using namespace zf;
using test::next_token_batch;
using test::run_blocks;

namespace {

double relative_gap(const torch::Tensor &got, const torch::Tensor &want) {
  const double scale = std::max(want.abs().max().item<double>(), 1e-12);
  return (got - want).abs().max().item<double>() / scale;
}

// The unfused loss: the whole logits, transformed, in float32, torch's cross-entropy.
torch::Tensor whole_logits_loss(const torch::Tensor &x, const torch::Tensor &weight, const torch::Tensor &targets,
                                LogitsTransform t) {
  torch::Tensor logits = torch::linear(x, weight);
  if (t.divisor != 1) logits = logits / t.divisor;
  if (t.softcap > 0) logits = torch::tanh(logits / t.softcap) * t.softcap;
  namespace F = torch::nn::functional;
  torch::Tensor total = F::cross_entropy(logits.to(torch::kFloat32), targets,
                                         F::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex).reduction(torch::kSum));
  return total / targets.ne(kIgnoreIndex).sum().clamp_min(1).to(torch::kFloat32);
}

}  // namespace

TEST_CASE("fused loss: the loss and both gradients of the whole logits' cross-entropy, in chunks of any size",
          "[model][fused]") {
  const LogitsTransform transform = GENERATE(LogitsTransform{1, 0}, LogitsTransform{2.5, 0}, LogitsTransform{1, 5.0},
                                             LogitsTransform{2.5, 5.0});
  const int64_t rows = 37, hidden = 16, vocab = 101;
  // Whole (the default budget), 5 rows of the forward a chunk and 13 entries of the vocabulary a slice
  // (the last ones partial), and 1 row / 1 entry.
  const int64_t chunk_bytes = GENERATE(int64_t(0), int64_t(4 * 101 * 5), int64_t(4));
  // libtorch's ops on each chunk (a CPU run's default), or the loss kernel's host loops (model.fused = "always").
  const FusedKernels fused = GENERATE(FusedKernels::gpu, FusedKernels::always);
  INFO("divisor " << transform.divisor << ", softcap " << transform.softcap << ", chunk bytes " << chunk_bytes
                  << ", kernel " << (fused == FusedKernels::always));
  torch::manual_seed(5);
  torch::Tensor x0 = torch::randn({rows, hidden}) * 2, w0 = torch::randn({vocab, hidden});
  torch::Tensor targets = torch::randint(vocab, {rows}, torch::kLong);
  targets.index_put_({torch::indexing::Slice(0, torch::indexing::None, 4)}, kIgnoreIndex);

  torch::Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  torch::Tensor want = whole_logits_loss(x, w, targets, transform);
  (want * 3).backward();  // an upstream gradient other than 1 (a loss scale, a micro-batch mean)
  torch::Tensor fx = x0.clone().requires_grad_(true), fw = w0.clone().requires_grad_(true);
  torch::Tensor got = fused_linear_cross_entropy(fx, fw, targets, transform, chunk_bytes, fused);
  (got * 3).backward();
  INFO("loss " << got.item<double>() << " vs " << want.item<double>());
  CHECK(got.scalar_type() == torch::kFloat32);
  // A few float32 ulps: the chunks sum in another order.
  CHECK(std::abs(got.item<double>() - want.item<double>()) <= 1e-6 * std::abs(want.item<double>()));
  CHECK(relative_gap(fx.grad(), x.grad()) < 1e-6);
  CHECK(relative_gap(fw.grad(), w.grad()) < 1e-6);
}

TEST_CASE("fused loss: a micro-batch without a counted target has loss 0 and zero gradients", "[model][fused]") {
  torch::manual_seed(6);
  torch::Tensor x = torch::randn({6, 8}).requires_grad_(true), w = torch::randn({11, 8}).requires_grad_(true);
  torch::Tensor loss = fused_linear_cross_entropy(x, w, torch::full({6}, kIgnoreIndex, torch::kLong), {}, 4 * 11 * 2);
  loss.backward();
  CHECK(loss.item<double>() == 0);
  CHECK(x.grad().abs().max().item<double>() == 0);
  CHECK(w.grad().abs().max().item<double>() == 0);
}

// Every parameter's gradient: the final norm's, the head's or the tied embedding's (which also gets
// the embedding lookup's), and every layer's through the hidden states' gradient.
TEST_CASE("fused loss: a model's forward_loss equals the loss of its logits, every gradient with it (gpt2, llama3, "
          "gemma3, granite)", "[model][fused]") {
  const std::string name = GENERATE(as<std::string>(), "gpt2", "llama3", "gemma3", "granite");
  INFO(name);
  std::unique_ptr<Model> model;
  Batch batch;
  if (name == "gpt2") {
    model = test::tiny_model("gpt2", /*tie=*/true);
    torch::manual_seed(7);
    batch = next_token_batch(torch::randint(61, {3, 16}, torch::kLong));
  } else {
    const std::string dir = test::source_dir() + "/tests/fixtures/families/" + name;
    model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "fused.toml"));
    batch = next_token_batch(SafetensorsFile::open(dir + "/expected.safetensors").load("input_ids"));
  }
  model->train(false);
  torch::Tensor want = model->loss(run_blocks(*model, batch), batch);
  want.backward();
  std::map<std::string, torch::Tensor> want_grads;
  for (ModelParameter &p : model->parameters()) {
    want_grads[p.name] = p.tensor.grad().clone();
    p.tensor.mutable_grad() = torch::Tensor();
  }
  torch::Tensor hidden = batch.inputs;
  const size_t blocks = model->block_names().size();
  for (size_t b = 0; b + 1 < blocks; ++b) hidden = model->forward_block(b, hidden, batch);
  torch::Tensor got = model->forward_loss(hidden, batch);
  got.backward();
  INFO("fused " << got.item<double>() << " vs " << want.item<double>());
  CHECK(std::abs(got.item<double>() - want.item<double>()) <= 1e-6 * std::abs(want.item<double>()));
  for (const ModelParameter &p : model->parameters()) {
    INFO(p.name);
    REQUIRE(p.tensor.grad().defined());
    CHECK(relative_gap(p.tensor.grad(), want_grads[p.name]) < 1e-5);
  }
}

TEST_CASE("fused loss: model.fused (the default) takes the fused loss, model.fused = false the whole logits' loss",
          "[model][fused]") {
  for (const bool fused : {true, false}) {
    auto model = make_model(RunConfig::parse(std::string("[model]\ntype = \"llama\"\nhidden = 32\nlayers = 1\nheads = 4\n"
                                                         "vocab = 61\nmax_seq = 16\n") + (fused ? "" : "fused = false\n"),
                                             "fused.toml"));
    torch::manual_seed(8);
    Batch batch = next_token_batch(torch::randint(61, {2, 8}, torch::kLong));
    torch::Tensor hidden = batch.inputs;
    for (size_t b = 0; b + 1 < model->block_names().size(); ++b) hidden = model->forward_block(b, hidden, batch);
    const std::string node = model->forward_loss(hidden, batch).grad_fn()->name();
    INFO("fused " << fused << ": " << node);
    CHECK((node.find("FusedLinearCrossEntropy") != std::string::npos) == fused);
  }
}

// The memory the fused loss frees shows in `zfcore estimate`: at Qwen2-1.5B's 8 x 512 tokens the
// whole logits (bf16) and their two float32 copies are 4096 x 151936 x 10 bytes = 5.8 GiB; on a GPU one
// chunk of 384 tokens in bf16, 0.11 GiB.
TEST_CASE("fused loss: zfcore estimate counts one chunk of logits at the loss, not all of them", "[model][fused]") {
  auto peak_at_loss = [](const std::string &fused) {
    test::Outcome e = test::run_command(test::zfcore() + " estimate --bytes " + test::source_dir() +
                                        "/examples/gpu/qwen2-1.5b-bench.toml --set model.fused=" + fused);
    INFO(e.output);
    REQUIRE(e.exit_code == 0);
    const size_t line = e.output.find("GPU peak per rank");
    REQUIRE(line != std::string::npos);
    const size_t at = e.output.find("at the loss ", line);
    REQUIRE(at != std::string::npos);
    return e.output.substr(at, e.output.find(',', at) - at);
  };
  const std::string fused = peak_at_loss("true"), unfused = peak_at_loss("false");
  INFO("fused: " << fused << "; unfused: " << unfused);
  CHECK(fused != unfused);
  auto gib = [](const std::string &text) { return std::stod(text.substr(std::string("at the loss ").size())); };
  CHECK(gib(unfused) - gib(fused) > 5.0);
}
