// Packed documents on the GPU: FlashAttention's variable-length kernel (bf16, cu_seqlens = the
// documents' starts, with and without a sliding window) computes what the block-diagonal masked
// attention computes, forward and backward; and packed rows give the loss of one document per row
// for Llama 3 and Qwen3.5 (Gated DeltaNet), in fp32 (masked attention) and bf16 (the flash kernel).
#include "gpu_skip.hpp"

#include "config/config.hpp"
#include "data/documents.hpp"
#include "data/sequence_source.hpp"
#include "engine/evaluate.hpp"
#include "model/attention.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("packed documents on the GPU: FlashAttention's variable-length kernel is the block-diagonal mask",
          "[gpu][model][packing]") {
  test::require_gpus(1);
  torch::manual_seed(5);
  auto options = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat32);
  // Two rows of 300: documents of 120, 1, 90 and 89 tokens, then 300.
  torch::Tensor positions = torch::cat({torch::arange(120), torch::arange(1), torch::arange(90), torch::arange(89),
                                        torch::arange(300)}).view({2, 300});
  const PackedDocuments documents = packed_documents(positions.to(torch::kCUDA));
  torch::Tensor q = torch::randn({2, 8, 300, 64}, options), k = torch::randn({2, 2, 300, 64}, options),
                v = torch::randn({2, 2, 300, 64}, options), out_grad = torch::randn({2, 8, 300, 64}, options);
  for (int64_t window : {0, 37}) {
    INFO("window " << window);
    AttentionOptions packed;
    packed.window = window;
    packed.documents = &documents;
    auto run = [&](torch::Dtype dtype) {
      std::vector<torch::Tensor> inputs;  // fresh leaves of this dtype
      for (const torch::Tensor &t : {q, k, v}) inputs.push_back(t.to(dtype).detach().requires_grad_());
      torch::Tensor out = causal_attention(inputs[0], inputs[1], inputs[2], packed);
      out.backward(out_grad.to(dtype));
      return std::vector<torch::Tensor>{out.to(torch::kFloat32), inputs[0].grad().to(torch::kFloat32),
                                        inputs[1].grad().to(torch::kFloat32), inputs[2].grad().to(torch::kFloat32)};
    };
    std::vector<torch::Tensor> exact = run(torch::kFloat32), flash = run(torch::kBFloat16);  // fp32: the mask
    for (size_t i = 0; i < exact.size(); ++i) {
      INFO("tensor " << i << " (out, dq, dk, dv)");
      const double scale = exact[i].abs().max().item<double>();
      CHECK((flash[i] - exact[i]).abs().max().item<double>() <= 0.03 * scale);
    }
    // The boundaries matter: one causal sequence per row is farther from it than bf16 rounding.
    AttentionOptions whole;
    whole.window = window;
    torch::Tensor mixed = causal_attention(q, k, v, whole);
    CHECK((mixed - exact[0]).abs().max().item<double>() > 0.1 * exact[0].abs().max().item<double>());
  }
}

TEST_CASE("packed documents on the GPU give the loss of one document per row (Llama 3, Qwen3.5, in fp32 and bf16)",
          "[gpu][model][packing]") {
  test::require_gpus(1);
  const std::string name = GENERATE("llama3", "qwen3_5", "gemma3");
  const std::string dtype = GENERATE("float32", "bfloat16");
  INFO(name << " in " << dtype);
  const std::string dir = test::source_dir() + "/tests/fixtures/families/" + name;
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\ndtype = \"" + dtype + "\"\n", "gpu.toml"));
  model->train(false);
  for (const ModelParameter &p : model->parameters()) p.tensor.set_data(p.tensor.detach().to(torch::kCUDA));
  const int64_t seq_len = 64, vocab = 96;
  torch::manual_seed(9);
  Documents documents;
  for (int64_t length : {1, 5, 64, 33, 17, 40, 9, 2, 23, 30, 12, 50}) {
    torch::Tensor ids = torch::randint(vocab, {length}, torch::kLong);
    documents.add(std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length),
                  std::vector<uint8_t>(size_t(length), 1));
  }
  auto unpacked = make_document_sequences(documents, seq_len, vocab, 0, "test");
  Runtime runtime;
  runtime.device = ZF_DEVICE_CUDA;
  auto loss_of = [&](std::shared_ptr<const SequenceSet> set) {
    const int64_t count = set->count();
    Batch batch = on_device(make_sequence_source(std::move(set), Split::train, 0.0, false, 1)->batch(0, count), runtime);
    torch::NoGradGuard no_grad;
    return model->loss(test::run_blocks(*model, batch), batch).item<double>();
  };
  const double one_each = loss_of(unpacked), packed = loss_of(pack_document_sequences(unpacked));
  CHECK(std::abs(packed - one_each) <= (dtype == "float32" ? 1e-4 : 0.02 * one_each));
}
