// Token shards: what write_token_shard writes, TokenShard maps back, in the layout docs/data.md
// gives (so other tools can write them); damaged files fail with the file named; the `tokens`
// source checks ids against the vocabulary and seq_len against the data.
#include "data/data_test_support.hpp"
#include "data/token_shard.hpp"
#include "model/model.hpp"
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

TEST_CASE("token shards: version 2 carries a loss mask and document starts, read back as written", "[data]") {
  std::string directory = test::scratch_dir("data_shards_v2");
  const std::vector<int64_t> ids = {5, 6, 7, 8, 9, 70000};
  const std::vector<uint8_t> mask = {0, 0, 1, 0, 1, 1};
  const std::vector<int64_t> starts = {0, 3, 4};
  write_token_shard(directory + "/docs.bin", ids, 70001, mask, starts);
  TokenShard shard(directory + "/docs.bin");
  CHECK(shard.version() == 2);
  CHECK(shard.bytes_per_id() == 4);
  CHECK(shard.has_mask());
  REQUIRE(shard.documents() == 3);
  for (int64_t i = 0; i < 6; ++i) CHECK((shard[i] == ids[size_t(i)] && shard.counted(i) == bool(mask[size_t(i)])));
  for (int64_t d = 0; d < 3; ++d) CHECK(shard.document_start(d) == starts[size_t(d)]);

  // The layout docs/data.md gives: documents at 32, flags at 40, then ids, mask bytes, uint64 starts.
  std::string bytes = test::read_text(directory + "/docs.bin");
  REQUIRE(bytes.size() == 64 + 4 * 6 + 6 + 8 * 3);
  uint32_t version, flags;
  uint64_t documents, third;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&documents, bytes.data() + 32, 8);
  std::memcpy(&flags, bytes.data() + 40, 4);
  std::memcpy(&third, bytes.data() + 64 + 24 + 6 + 16, 8);
  CHECK((version == 2 && documents == 3 && flags == 1 && third == 4));
  CHECK(bytes.substr(64 + 24, 6) == std::string("\0\0\1\0\1\1", 6));

  // Without a mask: every token counts; a version-1 shard stays version 1.
  write_token_shard(directory + "/nomask.bin", {1, 2, 3}, 0, {}, {0, 2});
  TokenShard nomask(directory + "/nomask.bin");
  CHECK((nomask.version() == 2 && !nomask.has_mask() && nomask.counted(1) && nomask.documents() == 2));
  write_token_shard(directory + "/v1.bin", {1, 2, 3});
  CHECK(TokenShard(directory + "/v1.bin").version() == 1);

  CHECK_THROWS_WITH(write_token_shard(directory + "/bad.bin", {1, 2}, 0, {1}, {}), Catch::Contains("1 loss flags"));
  CHECK_THROWS_WITH(write_token_shard(directory + "/bad.bin", {1, 2}, 0, {}, {1}), Catch::Contains("must be 0"));
  // Starts that go backwards, and a file cut inside the starts, name the file.
  std::string backwards = bytes;
  backwards[64 + 24 + 6 + 16] = 1;  // the third document starts at 1, before the second (3)
  test::write_file(directory + "/backwards.bin", backwards);
  CHECK_THROWS_WITH(TokenShard(directory + "/backwards.bin"),
                    Catch::Contains("backwards.bin") && Catch::Contains("document 2 starts at id 1"));
  test::write_file(directory + "/cut.bin", bytes.substr(0, bytes.size() - 8));
  CHECK_THROWS_WITH(TokenShard(directory + "/cut.bin"),
                    Catch::Contains("cut.bin") && Catch::Contains("3 document starts") && Catch::Contains("truncated"));
}

TEST_CASE("documents: a version-2 shard's documents, one per sequence, targets where its mask counts", "[data]") {
  std::string directory = test::scratch_dir("data_documents_source");
  // Two documents: [10 11 12 13] counting 12 and 13, [20 21 22] counting all.
  write_token_shard(directory + "/docs.bin", {10, 11, 12, 13, 20, 21, 22}, 100, {0, 0, 1, 1, 1, 1, 1}, {0, 4});
  auto source = make_data_source(test::data_config("type = \"documents\"\npath = \"" + directory +
                                                   "/docs.bin\"\nshuffle = false\nseq_len = 4"));
  REQUIRE(source->size() == 2);
  Batch batch = source->batch(0, 2);
  CHECK(test::row(batch.inputs, 0) == std::vector<int64_t>{10, 11, 12, 13});
  CHECK(test::row(batch.targets, 0) == std::vector<int64_t>{kIgnoreIndex, 12, 13, kIgnoreIndex});
  CHECK(test::row(batch.inputs, 1) == std::vector<int64_t>{20, 21, 22, 0});
  CHECK(test::row(batch.targets, 1) == std::vector<int64_t>{21, 22, kIgnoreIndex, kIgnoreIndex});

  // data.type = "tokens" would train across documents and on every token: refused, with the way.
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"tokens\"\npath = \"" + directory +
                                                       "/docs.bin\"\nseq_len = 2")),
                    Catch::Contains("docs.bin") && Catch::Contains("data.type = \"documents\""));
  write_token_shard(directory + "/stream.bin", {1, 2, 3, 4, 5});
  CHECK_THROWS_WITH(make_data_source(test::data_config("type = \"documents\"\npath = \"" + directory +
                                                       "/stream.bin\"\nseq_len = 2")),
                    Catch::Contains("stream.bin") && Catch::Contains("no document starts"));
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
  version[8] = 3;
  width[12] = 3;
  CHECK_THROWS_WITH(TokenShard(damaged("magic.bin", magic)), Catch::Contains("magic.bin: not a zfcore token shard"));
  CHECK_THROWS_WITH(TokenShard(damaged("version.bin", version)), Catch::Contains("format version 3"));
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
