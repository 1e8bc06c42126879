// data_test_support.hpp: helpers of the [data] tests: configs from a [data] table, scratch
// files, the tokenizer fixtures and batch rows as vectors.
#pragma once

#include "config/config.hpp"
#include "data/data_source.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf::test {

// A config whose [data] table is `data_table` (TOML lines), with [run] seed = seed.
RunConfig data_config(const std::string &data_table, int64_t seed = 1234);
void write_file(const std::string &path, const std::string &bytes);
// tests/fixtures/tokenizers/<name>; "" (and a Catch WARN) when the file is missing.
std::string tokenizer_fixture(const std::string &name);
// Row r of a [B, T] int64 tensor.
std::vector<int64_t> row(const torch::Tensor &tensor, int64_t r);
// A shard holding the ids 0, 1, ..., count - 1, so window w of seq_len starts with id w * seq_len.
std::string counting_shard(const std::string &directory, int64_t count, const std::string &name = "counting.bin");

}  // namespace zf::test
