// The order of the data: a pure function of (seed, chunk). Same seed, same batches; another seed,
// another order; the engine's chunk formula gives each rank its share and the ranks together read
// every sequence once per epoch; a chunk computed by a fresh source (a resumed run) equals the one
// an uninterrupted run reads; the eval split is fixed, disjoint from training and read once.
#include "data/data_test_support.hpp"
#include "data/order.hpp"
#include "model/model.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <set>

using namespace zf;

namespace {

constexpr int64_t kSeqLen = 4;

// A tokens source over a counting shard: sequence w holds ids 4w .. 4w+4, so inputs[0] / 4 is w.
std::unique_ptr<DataSource> counting_source(int64_t sequences, int64_t seed, const std::string &extra = "",
                                            Split split = Split::train) {
  // Of this process: ctest runs this file's cases side by side, each rewriting its shard.
  std::string directory = test::scratch_dir("data_counting_" + std::to_string(sequences) + "_" + std::to_string(getpid()));
  test::counting_shard(directory, sequences * kSeqLen + 1);
  return make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "/counting.bin\"\nseq_len = " +
                                                std::to_string(kSeqLen) + "\n" + extra, seed),
                          split);
}

std::vector<int64_t> sequence_ids(DataSource &source, int64_t chunk, int64_t micro_batch) {
  Batch batch = source.batch(chunk, micro_batch);
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < batch.samples; ++r) ids.push_back(test::row(batch.inputs, r)[0] / kSeqLen);
  return ids;
}

// The engine's chunk of (step, micro-step, rank): ((step-1) * accum + micro) * world + rank.
int64_t engine_chunk(int64_t step, int64_t micro, int64_t accum, int64_t rank, int64_t world) {
  return ((step - 1) * accum + micro) * world + rank;
}

}  // namespace

TEST_CASE("order: permutations are deterministic, complete and seed-dependent", "[data]") {
  std::vector<int64_t> a = permutation(1000, 1, 0), b = permutation(1000, 1, 0);
  CHECK(a == b);
  CHECK(a != permutation(1000, 2, 0));
  CHECK(a != permutation(1000, 1, 1));
  std::sort(a.begin(), a.end());
  for (int64_t i = 0; i < 1000; ++i) CHECK(a[size_t(i)] == i);
  SplitIndices split = split_indices(100, 0.05);
  CHECK(split.eval.size() == 5);
  CHECK(split.train.size() == 95);
  CHECK(split_indices(100, 0.0).eval.empty());
  CHECK(split_indices(10, 0.01).eval.size() == 1);  // a positive fraction holds out at least one
}

TEST_CASE("same seed, same batches, another seed, another order", "[data]") {
  auto a = counting_source(24, 1), b = counting_source(24, 1), c = counting_source(24, 2);
  bool differs = false;
  for (int64_t chunk = 0; chunk < 12; ++chunk) {
    Batch x = a->batch(chunk, 4), y = b->batch(chunk, 4);
    CHECK(torch::equal(x.inputs, y.inputs));
    CHECK(torch::equal(x.targets, y.targets));
    differs = differs || sequence_ids(*a, chunk, 4) != sequence_ids(*c, chunk, 4);
  }
  CHECK(differs);
  // Epochs are reshuffled: epoch 1 (chunks 6..11) is not epoch 0 again.
  std::vector<int64_t> epoch0, epoch1;
  for (int64_t chunk = 0; chunk < 6; ++chunk) {
    for (int64_t id : sequence_ids(*a, chunk, 4)) epoch0.push_back(id);
    for (int64_t id : sequence_ids(*a, chunk + 6, 4)) epoch1.push_back(id);
  }
  CHECK(epoch0 != epoch1);
  // shuffle = false reads the sequences in order.
  auto ordered = counting_source(24, 1, "shuffle = false");
  CHECK(sequence_ids(*ordered, 1, 4) == std::vector<int64_t>{4, 5, 6, 7});
}

TEST_CASE("W ranks with the engine's chunks read each sequence exactly once per epoch", "[data]") {
  const int64_t sequences = 24, micro_batch = 2, accum = 2;
  for (int64_t world : {1, 2, 3}) {
    auto source = counting_source(sequences, 7);
    int64_t steps_per_epoch = sequences / (micro_batch * accum * world);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      std::vector<int64_t> seen;
      std::vector<std::set<int64_t>> per_rank(static_cast<size_t>(world));
      for (int64_t step = 1 + epoch * steps_per_epoch; step <= (epoch + 1) * steps_per_epoch; ++step)
        for (int64_t micro = 0; micro < accum; ++micro)
          for (int64_t rank = 0; rank < world; ++rank)
            for (int64_t id : sequence_ids(*source, engine_chunk(step, micro, accum, rank, world), micro_batch)) {
              seen.push_back(id);
              per_rank[size_t(rank)].insert(id);
            }
      INFO("world " << world << " epoch " << epoch);
      std::sort(seen.begin(), seen.end());
      std::vector<int64_t> all(sequences);
      for (int64_t i = 0; i < sequences; ++i) all[size_t(i)] = i;
      CHECK(seen == all);
      for (const auto &mine : per_rank) CHECK(int64_t(mine.size()) == sequences / world);
    }
  }
}

TEST_CASE("resume: a chunk computed fresh equals the chunk of an uninterrupted run", "[data]") {
  const int64_t micro_batch = 5;  // 24 sequences: batches straddle epochs
  auto uninterrupted = counting_source(24, 3);
  std::vector<Batch> batches;
  for (int64_t chunk = 0; chunk < 20; ++chunk) batches.push_back(uninterrupted->batch(chunk, micro_batch));
  for (int64_t chunk : {19, 4, 13, 9}) {
    auto resumed = counting_source(24, 3);  // a new process starting at this chunk
    Batch batch = resumed->batch(chunk, micro_batch);
    CHECK(torch::equal(batch.inputs, batches[size_t(chunk)].inputs));
    CHECK(torch::equal(batch.targets, batches[size_t(chunk)].targets));
  }
}

TEST_CASE("eval split: fixed, disjoint from training, read once in short-tailed chunks", "[data]") {
  auto train = counting_source(24, 5, "eval_fraction = 0.25");
  auto eval = counting_source(24, 5, "eval_fraction = 0.25", Split::eval);
  REQUIRE(eval);
  CHECK(train->size() == 18);
  CHECK(eval->size() == 6);
  std::vector<int64_t> eval_ids = sequence_ids(*eval, 0, 4), tail = sequence_ids(*eval, 1, 4);
  CHECK(tail.size() == 2);
  eval_ids.insert(eval_ids.end(), tail.begin(), tail.end());
  CHECK_THROWS_WITH(eval->batch(2, 4), Catch::Contains("past the end of the eval split (6 sequences)"));
  std::set<int64_t> train_ids;
  for (int64_t chunk = 0; chunk < 6; ++chunk)
    for (int64_t id : sequence_ids(*train, chunk, 3)) train_ids.insert(id);
  CHECK(train_ids.size() == 18);
  for (int64_t id : eval_ids) CHECK(train_ids.count(id) == 0);
  CHECK(std::set<int64_t>(eval_ids.begin(), eval_ids.end()).size() == 6);
  // The held-out set does not depend on run.seed.
  auto other_seed = counting_source(24, 99, "eval_fraction = 0.25", Split::eval);
  CHECK(sequence_ids(*other_seed, 0, 6) == sequence_ids(*eval, 0, 6));
  CHECK_FALSE(counting_source(24, 5, "", Split::eval));  // no eval_fraction: no eval source
}

TEST_CASE("text source: the byte-tokenized file in windows, targets shifted by one", "[data]") {
  std::string directory = test::scratch_dir("data_text_source");
  test::write_file(directory + "/data.txt", "abcdefghij");
  auto source = make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/data.txt\"\nseq_len = 4\nshuffle = false"));
  CHECK(source->size() == 2);
  CHECK(source->vocab_size() == 257);
  Batch batch = source->batch(0, 2);
  CHECK(test::row(batch.inputs, 0) == std::vector<int64_t>{'a', 'b', 'c', 'd'});
  CHECK(test::row(batch.targets, 0) == std::vector<int64_t>{'b', 'c', 'd', 'e'});
  CHECK(test::row(batch.inputs, 1) == std::vector<int64_t>{'e', 'f', 'g', 'h'});
  CHECK(test::row(batch.targets, 1) == std::vector<int64_t>{'f', 'g', 'h', 'i'});
  CHECK((batch.samples == 2 && batch.tokens == 8));

  test::write_file(directory + "/empty.txt", "");
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/empty.txt\"")),
                    Catch::Contains("test.toml:5:8: data.path") && Catch::Contains("empty.txt is empty"));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/absent.txt\"")),
                    Catch::Contains("test.toml:5:8: data.path: no such file") && Catch::Contains("absent.txt"));
  std::filesystem::create_symlink(directory + "/loop_b.txt", directory + "/loop_a.txt");
  std::filesystem::create_symlink(directory + "/loop_a.txt", directory + "/loop_b.txt");
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/loop_a.txt\"")),
                    Catch::Contains("test.toml:5:8: data.path: cannot read") &&
                        Catch::Contains("loop_a.txt: its symbolic links lead round in a loop"));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/data.txt\"\nseq_len = 10")),
                    Catch::Contains("seq_len = 10 is larger than the data") && Catch::Contains("at most 9"));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/data.txt\"\nseq_len = 4\nvocab = 256")),
                    Catch::Contains("data.vocab = 256, but tokenizer byte has 257 ids"));
}

TEST_CASE("synthetic source: ids below data.vocab, a pure function of the seed", "[data]") {
  auto a = make_data_source(test::data_config("type = \"synthetic\"\nvocab = 50\nseq_len = 16\nsamples = 10", 1));
  auto b = make_data_source(test::data_config("type = \"synthetic\"\nvocab = 50\nseq_len = 16\nsamples = 10", 1));
  CHECK(a->size() == 10);
  Batch x = a->batch(3, 4);
  CHECK(torch::equal(x.inputs, b->batch(3, 4).inputs));
  CHECK(x.inputs.max().item<int64_t>() < 50);
  CHECK(x.inputs.min().item<int64_t>() >= 0);
  // Targets are the inputs shifted by one.
  CHECK(torch::equal(x.inputs.slice(1, 1), x.targets.slice(1, 0, 15)));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"synthetic\"")), Catch::Contains("needs data.vocab"));
}

TEST_CASE("random source: unchanged for linear_stack, with a separate eval draw", "[data]") {
  auto train = make_data_source(test::data_config("type = \"random\"\nsamples = 32\neval_fraction = 0.25"));
  auto eval = make_data_source(test::data_config("type = \"random\"\nsamples = 32\neval_fraction = 0.25"), Split::eval);
  CHECK(train->size() == 32);
  REQUIRE(eval);
  CHECK(eval->size() == 8);
  CHECK(eval->batch(1, 5).samples == 3);
  CHECK(train->batch(0, 4).inputs.sizes() == torch::IntArrayRef{4, 64});
}
