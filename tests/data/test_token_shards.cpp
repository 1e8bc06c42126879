// Token shards: what write_token_shard writes, TokenShard maps back, in the layout docs/data.md
// gives (so other tools can write them); damaged files fail with the file named; the `tokens`
// source checks ids against the vocabulary and seq_len against the data.
#include "data/data_test_support.hpp"
#include "data/token_shard.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <cstring>

using namespace zf;

TEST_CASE("token shards: write, map and read back, uint16 or uint32 by the largest id", "[data]") {
  std::string directory = test::scratch_dir("data_shards_roundtrip");
  std::vector<int64_t> small = {0, 1, 65535, 42, 7};
  write_token_shard(directory + "/small.bin", small, 65536);
  TokenShard a(directory + "/small.bin");
  CHECK(a.size() == 5);
  CHECK(a.bytes_per_id() == 2);
  CHECK(a.vocab() == 65536);
  for (int64_t i = 0; i < a.size(); ++i) CHECK(a[i] == small[size_t(i)]);

  std::vector<int64_t> large = {151643, 0, 4294967295};
  write_token_shard(directory + "/large.bin", large);
  TokenShard b(directory + "/large.bin");
  CHECK(b.bytes_per_id() == 4);
  CHECK(b.vocab() == 0);
  CHECK(b[0] == 151643);
  CHECK(b[2] == 4294967295);

  // The layout, byte by byte: magic, version 1, 2 bytes per id, count, vocab, zeros, ids.
  std::string bytes = test::read_text(directory + "/small.bin");
  REQUIRE(bytes.size() == 64 + 2 * 5);
  CHECK(bytes.substr(0, 8) == "ZFTOKENS");
  uint32_t version, width;
  uint64_t count, vocab;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&width, bytes.data() + 12, 4);
  std::memcpy(&count, bytes.data() + 16, 8);
  std::memcpy(&vocab, bytes.data() + 24, 8);
  CHECK((version == 1 && width == 2 && count == 5 && vocab == 65536));
  CHECK(bytes.substr(32, 32) == std::string(32, '\0'));
  CHECK(uint8_t(bytes[64 + 4]) == 0xFF);  // 65535, little-endian
  CHECK_THROWS_WITH(write_token_shard(directory + "/bad.bin", {5}, 5), Catch::Contains("not below the vocabulary"));
  CHECK_THROWS_WITH(write_token_shard(directory + "/bad.bin", {-1}), Catch::Contains("does not fit"));
}

TEST_CASE("token shards: damaged headers and sizes are errors naming the file", "[data]") {
  std::string directory = test::scratch_dir("data_shards_damaged");
  write_token_shard(directory + "/good.bin", {1, 2, 3, 4});
  std::string good = test::read_text(directory + "/good.bin");
  auto damaged = [&](const std::string &name, std::string bytes) {
    std::string path = directory + "/" + name;
    test::write_file(path, bytes);
    return path;
  };
  std::string magic = good, version = good, width = good;
  magic[0] = 'X';
  version[8] = 2;
  width[12] = 3;
  CHECK_THROWS_WITH(TokenShard(damaged("magic.bin", magic)), Catch::Contains("magic.bin: not a zfcore token shard"));
  CHECK_THROWS_WITH(TokenShard(damaged("version.bin", version)), Catch::Contains("format version 2"));
  CHECK_THROWS_WITH(TokenShard(damaged("width.bin", width)), Catch::Contains("3 bytes per id"));
  CHECK_THROWS_WITH(TokenShard(damaged("truncated.bin", good.substr(0, good.size() - 1))),
                    Catch::Contains("truncated.bin") && Catch::Contains("truncated or corrupted"));
  CHECK_THROWS_WITH(TokenShard(damaged("short.bin", "ZFTOK")), Catch::Contains("too short"));
  CHECK_THROWS_WITH(TokenShard(directory + "/absent.bin"), Catch::Contains("absent.bin: cannot open"));
}

TEST_CASE("token shards: a file, a directory or a glob names the shards, sorted", "[data]") {
  std::string directory = test::scratch_dir("data_shards_find");
  for (const char *name : {"b.bin", "a.bin", "c.txt"}) test::write_file(directory + "/" + name, "");
  CHECK(find_token_shards(directory) == std::vector<std::string>{directory + "/a.bin", directory + "/b.bin"});
  CHECK(find_token_shards(directory + "/*.bin") == std::vector<std::string>{directory + "/a.bin", directory + "/b.bin"});
  CHECK(find_token_shards(directory + "/c.txt") == std::vector<std::string>{directory + "/c.txt"});
  CHECK_THROWS_WITH(find_token_shards(directory + "/none*.bin"), Catch::Contains("no file matches"));
}

TEST_CASE("tokens source: windows of seq_len + 1 across shards, ids checked against the vocabulary", "[data]") {
  std::string directory = test::scratch_dir("data_tokens_source");
  test::counting_shard(directory, 41, "a.bin");  // windows of 8 (+1): 5
  test::counting_shard(directory, 9, "b.bin");   // 1
  test::counting_shard(directory, 5, "c.bin");   // too short: unused
  auto source = make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "\"\nseq_len = 8\nshuffle = false"));
  CHECK(source->size() == 6);
  Batch batch = source->batch(0, 6);
  for (int64_t r = 0; r < 5; ++r) {
    CHECK(test::row(batch.inputs, r)[0] == 8 * r);
    CHECK(test::row(batch.targets, r)[7] == 8 * r + 8);  // the shifted next id
  }
  CHECK(test::row(batch.inputs, 5) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(batch.tokens == 6 * 8);

  // data.vocab below the largest id: the first batch that reads it fails, naming the shard.
  auto bounded = make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "/a.bin\"\nseq_len = 8\nvocab = 20\nshuffle = false"));
  CHECK(bounded->vocab_size() == 20);
  CHECK_NOTHROW(bounded->batch(0, 2));
  CHECK_THROWS_WITH(bounded->batch(1, 2), Catch::Contains("a.bin: id 20 at position 20 is not below the vocabulary size 20"));

  // A shard written for a larger vocabulary than data.vocab is refused when loading.
  write_token_shard(directory + "/wide.bin", std::vector<int64_t>(20, 1), 1000);
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "/wide.bin\"\nseq_len = 8\nvocab = 500")),
                    Catch::Contains("wide.bin: written for a vocabulary of 1000 ids, but data.vocab = 500"));
}

TEST_CASE("tokens source: errors point at the config", "[data]") {
  std::string directory = test::scratch_dir("data_tokens_errors");
  test::counting_shard(directory, 10);
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"tokens\"")),
                    Catch::Contains("test.toml:4:8") && Catch::Contains("needs data.path"));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "/missing*.bin\"")),
                    Catch::Contains("test.toml:5:8: data.path") && Catch::Contains("missing*.bin"));
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory + "\"\nseq_len = 10")),
                    Catch::Contains("test.toml:6:11") && Catch::Contains("seq_len = 10 is larger than the data") &&
                        Catch::Contains("at most 9"));
}
