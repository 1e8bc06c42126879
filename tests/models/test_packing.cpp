// Packed documents (data.packing) against the same documents one per sequence: the loss and every
// gradient of GPT-2 and of each family of tests/fixtures/families (full and sliding-window attention,
// RoPE variants, Gated DeltaNet) agree within fp32 rounding, with and without activation
// checkpointing; the same rows without their document boundaries do not.
#include "config/config.hpp"
#include "data/documents.hpp"
#include "data/sequence_source.hpp"
#include "model/attention.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

namespace {

// Documents of these lengths, ids drawn below vocab; about one token in five is not counted (a
// prompt), and the first is never counted.
Documents random_documents(const std::vector<int64_t> &lengths, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  Documents documents;
  for (int64_t length : lengths) {
    torch::Tensor ids = torch::randint(vocab, {length}, torch::kLong);
    torch::Tensor counted = torch::rand({length}).gt(0.2);
    std::vector<int64_t> tokens(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
    std::vector<uint8_t> flags(static_cast<size_t>(length), 0);
    for (int64_t i = 0; i < length; ++i) flags[size_t(i)] = i > 0 && counted[i].item<bool>();
    documents.add(tokens, flags);
  }
  return documents;
}

// All of a set's sequences, in order, as one batch.
Batch whole_set(std::shared_ptr<const SequenceSet> set) {
  const int64_t count = set->count();
  return make_sequence_source(std::move(set), Split::train, 0.0, false, 1)->batch(0, count);
}

struct Result {
  double loss;
  std::vector<torch::Tensor> grads;
};

Result loss_and_grads(Model &model, const Batch &batch) {
  for (const ModelParameter &p : model.parameters()) p.tensor.mutable_grad() = torch::Tensor();
  torch::Tensor loss = model.loss(test::run_blocks(model, batch), batch);
  loss.backward();
  Result result{loss.item<double>(), {}};
  for (const ModelParameter &p : model.parameters()) result.grads.push_back(p.tensor.grad().clone());
  return result;
}

void check_close(const Result &packed, const Result &unpacked, Model &model) {
  CHECK(std::abs(packed.loss - unpacked.loss) <= 1e-5);
  const std::vector<ModelParameter> parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    INFO(parameters[i].name);
    const double scale = std::max(unpacked.grads[i].abs().max().item<double>(), 1e-12);
    CHECK((packed.grads[i] - unpacked.grads[i]).abs().max().item<double>() <= 1e-4 * scale);
  }
}

// Lengths that leave documents inside one sequence, starting mid-row, at a row's start, of one
// token, and (for sequences of 128) across the Gated DeltaNet's chunks of 64.
std::vector<int64_t> lengths_for(int64_t seq_len) {
  std::vector<int64_t> lengths = {1, 2, 3, 5, 7, 9, 12, seq_len, seq_len / 2 + 3, seq_len / 3, seq_len / 4 + 1,
                                  seq_len - 5, 4, seq_len / 2 - 1, 11, 6};
  if (seq_len >= 128) lengths.insert(lengths.end(), {70, 100, 65, 63, 90});
  return lengths;
}

// The same documents one per row and packed: the packed rows are fewer, restart positions, and
// give the same loss and gradients.
void check_packing(Model &model, int64_t seq_len, int64_t vocab) {
  model.train(false);
  auto unpacked = make_document_sequences(random_documents(lengths_for(seq_len), vocab, 7), seq_len, vocab, 0, "test");
  auto packed = pack_document_sequences(unpacked);
  REQUIRE(packed);
  Batch one_each = whole_set(unpacked), together = whole_set(packed);
  REQUIRE(together.packed.defined());
  CHECK(together.samples < one_each.samples);
  CHECK(together.tokens == one_each.tokens);
  CHECK(together.targets.ne(kIgnoreIndex).sum().item<int64_t>() == one_each.targets.ne(kIgnoreIndex).sum().item<int64_t>());
  const Result reference = loss_and_grads(model, one_each);
  check_close(loss_and_grads(model, together), reference, model);
  // Without the boundaries (one causal sequence per row, positions 0..T-1) the loss is another.
  Batch mixed = together;
  mixed.packed = PackedDocuments();
  CHECK(std::abs(loss_and_grads(model, mixed).loss - reference.loss) > 1e-3);
}

std::string fixture_dir(const std::string &name) { return test::source_dir() + "/tests/fixtures/families/" + name; }

}  // namespace

TEST_CASE("packing: GPT-2's packed documents give the loss and gradients of one document per sequence",
          "[model][packing]") {
  auto model = test::tiny_model("gpt2", true);
  check_packing(*model, 16, 61);
}

TEST_CASE("packing: every family's packed documents give the loss and gradients of one document per sequence, "
          "also with activation checkpointing", "[model][packing]") {
  const std::string name = GENERATE("llama3", "mistral", "gemma3", "gemma4", "qwen3_5", "ministral3", "olmo3", "phi3",
                                    "granite", "smollm3");
  const bool recompute = GENERATE(false, true);
  INFO(name << (recompute ? ", activation checkpointing" : ""));
  const TransformerShape shape = read_hf_config(fixture_dir(name));
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + fixture_dir(name) + "\"\n" +
                                               (recompute ? "activation_checkpointing = true\n" : ""),
                                           "packing.toml"));
  check_packing(*model, std::min<int64_t>(shape.max_seq, 128), shape.vocab);
}

TEST_CASE("packing: attention over packed rows keeps each document to itself, inside a sliding window",
          "[model][packing]") {
  torch::manual_seed(11);
  // Two rows: documents of 5, 9 and 2 tokens, then 16.
  torch::Tensor positions = torch::cat({torch::arange(5), torch::arange(9), torch::arange(2), torch::arange(16)}).view({2, 16});
  PackedDocuments documents = packed_documents(positions);
  CHECK(documents.longest == 16);
  CHECK(documents.starts.to(torch::kLong).equal(torch::tensor({0, 5, 14, 16, 32}, torch::kLong)));
  torch::Tensor q = torch::randn({2, 4, 16, 8}), k = torch::randn({2, 2, 16, 8}), v = torch::randn({2, 2, 16, 8});
  for (int64_t window : {0, 4}) {
    INFO("window " << window);
    AttentionOptions options;
    options.window = window;
    options.documents = &documents;
    torch::Tensor out = causal_attention(q, k, v, options);
    AttentionOptions alone;
    alone.window = window;
    // Each document on its own is plain causal attention over its tokens.
    const int64_t spans[][3] = {{0, 0, 5}, {0, 5, 9}, {0, 14, 2}, {1, 0, 16}};
    for (const auto &span : spans) {
      auto cut = [&](const torch::Tensor &t) { return t.select(0, span[0]).narrow(1, span[1], span[2]).unsqueeze(0); };
      torch::Tensor want = causal_attention(cut(q), cut(k), cut(v), alone);
      CHECK((cut(out) - want).abs().max().item<double>() <= 1e-6);
    }
  }
}
