#include "data/data_test_support.hpp"

#include "data/token_shard.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sys/stat.h>

namespace zf::test {

RunConfig data_config(const std::string &data_table, int64_t seed) {
  return RunConfig::parse("[run]\nseed = " + std::to_string(seed) + "\n[data]\n" + data_table + "\n", "test.toml");
}

void write_file(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string tokenizer_fixture(const std::string &name) {
  std::string path = source_dir() + "/tests/fixtures/tokenizers/" + name;
  struct stat info {};
  if (stat(path.c_str(), &info) != 0) {
    WARN("fixture " << path << " is missing (tools/make_fixtures.py and "
         "tests/fixtures/tokenizers/make_split_fixtures.py write them); skipped");
    return "";
  }
  return path;
}

std::vector<int64_t> row(const torch::Tensor &tensor, int64_t r) {
  torch::Tensor line = tensor[r].contiguous();
  return std::vector<int64_t>(line.data_ptr<int64_t>(), line.data_ptr<int64_t>() + line.numel());
}

std::string counting_shard(const std::string &directory, int64_t count, const std::string &name) {
  std::vector<int64_t> ids(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) ids[size_t(i)] = i;
  std::string path = directory + "/" + name;
  write_token_shard(path, ids);
  return path;
}

}  // namespace zf::test
