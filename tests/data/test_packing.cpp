// data.packing: documents packed best-fit decreasing into sequences, token by token (positions
// restart, a document's last token predicts nothing, long documents are cut and counted), at least
// 95% of the positions filled on lengths drawn like Alpaca's, the same sequences on every load; a
// source without documents refuses the key.
#include "data/data_test_support.hpp"
#include "data/documents.hpp"
#include "data/sequences.hpp"
#include "model/model.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <random>
#include <set>

using namespace zf;

namespace {

constexpr int64_t kPad = 99;

// Document d of these lengths holds the ids 100 * (d + 1) + i, every token counted but the first.
Documents numbered_documents(const std::vector<int64_t> &lengths) {
  Documents documents;
  for (size_t d = 0; d < lengths.size(); ++d) {
    std::vector<int64_t> ids;
    std::vector<uint8_t> counted;
    for (int64_t i = 0; i < lengths[d]; ++i) {
      ids.push_back(100 * int64_t(d + 1) + i);
      counted.push_back(i > 0);
    }
    documents.add(ids, counted);
  }
  return documents;
}

std::shared_ptr<const SequenceSet> packed_set(const std::vector<int64_t> &lengths, int64_t seq_len) {
  auto set = pack_document_sequences(make_document_sequences(numbered_documents(lengths), seq_len, 10000, kPad, "test"));
  REQUIRE(set);
  return set;
}

struct Row {
  std::vector<int64_t> inputs, targets, positions;
  int64_t tokens;
};

Row row_of(const SequenceSet &set, int64_t index) {
  const size_t n = size_t(set.seq_len());
  Row row{std::vector<int64_t>(n), std::vector<int64_t>(n), std::vector<int64_t>(n), 0};
  row.tokens = set.fill(index, row.inputs.data(), row.targets.data());
  REQUIRE(set.fill_positions(index, row.positions.data()));
  return row;
}

}  // namespace

TEST_CASE("packing: best-fit decreasing, positions restart, a document's last token predicts nothing", "[data][packing]") {
  // Longest first: 7 opens row 0 (room 3), 6 opens row 1 (room 4), 4 fills row 1 (least room that
  // holds it), 3 fills row 0, 2 opens row 2, 1 joins it.
  auto set = packed_set({3, 7, 1, 4, 6, 2}, 10);
  REQUIRE(set->count() == 3);
  Row first = row_of(*set, 0);
  CHECK(first.inputs == std::vector<int64_t>{200, 201, 202, 203, 204, 205, 206, 100, 101, 102});
  CHECK(first.positions == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2});
  const int64_t I = kIgnoreIndex;
  CHECK(first.targets == std::vector<int64_t>{201, 202, 203, 204, 205, 206, I, 101, 102, I});
  CHECK(first.tokens == 10);
  Row second = row_of(*set, 1);
  CHECK(second.inputs == std::vector<int64_t>{500, 501, 502, 503, 504, 505, 400, 401, 402, 403});
  Row third = row_of(*set, 2);
  CHECK(third.inputs == std::vector<int64_t>{600, 601, 300, kPad, kPad, kPad, kPad, kPad, kPad, kPad});
  CHECK(third.targets == std::vector<int64_t>{601, I, I, I, I, I, I, I, I, I});
  CHECK(third.positions == std::vector<int64_t>{0, 1, 0, 0, 1, 2, 3, 4, 5, 6});  // the padding is a document of its own
  CHECK(third.tokens == 3);
  CHECK_THAT(set->describe(), Catch::Contains("6 documents packed into 3 sequences of 10 tokens") &&
                                  Catch::Contains("76.67% of the positions hold tokens"));
}

TEST_CASE("packing: a document longer than seq_len keeps its first seq_len tokens, and the log counts it",
          "[data][packing]") {
  auto set = packed_set({12, 4}, 8);
  REQUIRE(set->count() == 2);
  Row cut = row_of(*set, 0);
  CHECK(cut.inputs == std::vector<int64_t>{100, 101, 102, 103, 104, 105, 106, 107});
  CHECK(cut.targets.back() == kIgnoreIndex);  // token 108 is not in the sequence
  CHECK_THAT(set->describe(), Catch::Contains("1 documents longer than data.seq_len are cut to it (4 tokens left out)"));
}

TEST_CASE("packing: lengths drawn like Alpaca's fill at least 95% of the positions, the same way on every load",
          "[data][packing]") {
  // Alpaca's examples in a Llama tokenizer: about 150 tokens on average (template, instruction,
  // input, response), a long tail to about 1,500. 4,000 of them into sequences of 1,024.
  std::mt19937_64 random(52002);
  std::lognormal_distribution<double> draw(std::log(130.0), 0.6);
  std::vector<int64_t> lengths;
  int64_t total = 0;
  for (int i = 0; i < 4000; ++i) {
    lengths.push_back(std::clamp<int64_t>(int64_t(draw(random)), 20, 1500));
    total += std::min<int64_t>(lengths.back(), 1024);
  }
  auto set = packed_set(lengths, 1024);
  int64_t tokens = 0;
  std::multiset<int64_t> seen;  // every document once: its first id, 100 * (d + 1)
  for (int64_t s = 0; s < set->count(); ++s) {
    Row row = row_of(*set, s);
    tokens += row.tokens;
    for (int64_t t = 0; t < row.tokens; ++t)
      if (row.positions[size_t(t)] == 0) seen.insert(row.inputs[size_t(t)]);
  }
  CHECK(tokens == total);
  CHECK(seen.size() == lengths.size());
  CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == lengths.size());
  const double share = double(tokens) / double(set->count() * 1024);
  INFO("non-padding share " << share << " over " << set->count() << " sequences");
  CHECK(share >= 0.95);
  auto again = packed_set(lengths, 1024);
  REQUIRE(again->count() == set->count());
  for (int64_t s : {int64_t(0), set->count() / 2, set->count() - 1}) CHECK(row_of(*again, s).inputs == row_of(*set, s).inputs);
}

TEST_CASE("packing: data.packing on alpaca data gives batches with restarting positions, and a token stream refuses it",
          "[data][packing]") {
  std::string directory = test::scratch_dir("data_packing_" + std::to_string(getpid()));
  test::write_file(directory + "/data.json", R"([{"instruction": "Hi", "output": "Yo"},
                                                 {"instruction": "Add.", "input": "1 2", "output": "3"},
                                                 {"instruction": "Say a longer thing", "output": "A longer thing"}])");
  auto source = make_data_source(test::data_config("type = \"alpaca\"\npath = \"" + directory +
                                                   "/data.json\"\nshuffle = false\nseq_len = 600\npacking = true"));
  REQUIRE(source->size() == 1);  // all three fit one sequence
  Batch batch = source->batch(0, 1);
  REQUIRE(batch.packed.defined());
  CHECK(batch.packed.positions.eq(0).sum().item<int64_t>() == 4);  // three documents and the padding
  CHECK(batch.packed.starts.numel() == 5);
  CHECK(batch.packed.starts[-1].item<int64_t>() == 600);
  CHECK(batch.tokens == 145 + 214 + 173);

  std::string shard = test::counting_shard(directory, 100);
  try {
    make_data_source(test::data_config("type = \"tokens\"\npath = \"" + shard + "\"\nseq_len = 8\npacking = true"));
    FAIL("data.packing on a token stream was accepted");
  } catch (const Error &error) {
    CHECK_THAT(error.what(), Catch::Contains("test.toml") && Catch::Contains("data.packing") &&
                                 Catch::Contains("remove data.packing"));
  }
}
