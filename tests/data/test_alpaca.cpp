// Alpaca instruction data, token by token with the byte tokenizer: the prompt follows the Alpaca
// template, only response tokens and EOS are targets, padding is EOS with ignored targets, long
// examples are cut; malformed files name the element and the field.
#include "data/data_test_support.hpp"
#include "data/sequences.hpp"
#include "model/model.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

using namespace zf;

namespace {

constexpr int64_t kEos = 256;  // the byte tokenizer's EOS, also its padding

std::unique_ptr<DataSource> alpaca_source(const std::string &json, int64_t seq_len, const std::string &name = "data.json") {
  // Each test process its own directory: ctest runs this file's cases side by side.
  std::string directory = test::scratch_dir("data_alpaca_" + std::to_string(getpid()));
  test::write_file(directory + "/" + name, json);
  return make_data_source(test::data_config("type = \"alpaca\"\npath = \"" + directory + "/" + name +
                                            "\"\nshuffle = false\nseq_len = " + std::to_string(seq_len)));
}

std::vector<int64_t> bytes(const std::string &text) { return std::vector<int64_t>(text.begin(), text.end()); }

}  // namespace

TEST_CASE("alpaca prompt: the Stanford Alpaca templates, with and without input", "[data]") {
  CHECK(alpaca_prompt("Say hi.", "") ==
        "Below is an instruction that describes a task. Write a response that appropriately completes the request.\n\n"
        "### Instruction:\nSay hi.\n\n### Response:\n");
  CHECK(alpaca_prompt("Add.", "1 2") ==
        "Below is an instruction that describes a task, paired with an input that provides further context. Write a "
        "response that appropriately completes the request.\n\n### Instruction:\nAdd.\n\n### Input:\n1 2\n\n### Response:\n");
}

TEST_CASE("alpaca: loss on the response and EOS only, padding ignored, token by token", "[data]") {
  std::string prompt = alpaca_prompt("Hi", "");
  int64_t p = int64_t(prompt.size());
  int64_t seq_len = p + 5;  // prompt, "Yo", EOS, then two positions of padding
  auto source = alpaca_source(R"([{"instruction": "Hi", "input": "", "output": "Yo"}])", seq_len);
  REQUIRE(source->size() == 1);
  Batch batch = source->batch(0, 1);

  std::vector<int64_t> inputs = bytes(prompt + "Yo");
  inputs.push_back(kEos);
  inputs.push_back(kEos);  // padding
  inputs.push_back(kEos);
  std::vector<int64_t> targets(size_t(seq_len), kIgnoreIndex);
  targets[size_t(p - 1)] = 'Y';  // the last prompt position predicts the first response token
  targets[size_t(p)] = 'o';
  targets[size_t(p + 1)] = kEos;
  CHECK(test::row(batch.inputs, 0) == inputs);
  CHECK(test::row(batch.targets, 0) == targets);
  CHECK(batch.tokens == p + 3);  // padding does not count
  CHECK(batch.samples == 1);
}

TEST_CASE("alpaca: long examples are cut to seq_len, prompts that leave no room are dropped", "[data]") {
  std::string json = R"([{"instruction": "Hi", "output": "Yo"},
                         {"instruction": "A much longer instruction that cannot fit", "output": "x"}])";
  int64_t p = int64_t(alpaca_prompt("Hi", "").size());
  auto source = alpaca_source(json, p + 1);  // room for "Y" and "o" as targets, not for EOS
  REQUIRE(source->size() == 1);               // the second example is dropped (with a warning)
  Batch batch = source->batch(0, 1);
  CHECK(test::row(batch.inputs, 0) == bytes(alpaca_prompt("Hi", "") + "Y"));
  std::vector<int64_t> targets = test::row(batch.targets, 0);
  CHECK(targets[size_t(p - 1)] == 'Y');
  CHECK(targets[size_t(p)] == 'o');
  CHECK(std::count(targets.begin(), targets.end(), kIgnoreIndex) == p - 1);

  CHECK_THROWS_WITH(alpaca_source(json, 20), Catch::Contains("leaves no room for any response"));
}

TEST_CASE("alpaca: an input selects the template with input, JSON Lines are read too", "[data]") {
  auto source = alpaca_source("{\"instruction\": \"Add.\", \"input\": \"1 2\", \"output\": \"3\"}\n\n"
                              "{\"instruction\": \"Hi\", \"input\": null, \"output\": \"Yo\"}\n", 400, "data.jsonl");
  REQUIRE(source->size() == 2);
  Batch batch = source->batch(0, 2);
  std::vector<int64_t> first = test::row(batch.inputs, 0);
  std::string prompt = alpaca_prompt("Add.", "1 2");
  CHECK(std::vector<int64_t>(first.begin(), first.begin() + int64_t(prompt.size()) + 2) == [&] {
    std::vector<int64_t> expected = bytes(prompt + "3");
    expected.push_back(kEos);
    return expected;
  }());
}

TEST_CASE("alpaca: malformed data names the element and the field", "[data]") {
  CHECK_THROWS_WITH(alpaca_source("[{\"instruction\": \"a\", \"output\": \"b\"}, 7]", 300),
                    Catch::Contains("data.json: element 1 is number, not an object"));
  CHECK_THROWS_WITH(alpaca_source("[{\"instruction\": \"a\"}]", 300),
                    Catch::Contains("element 0 has no \"output\""));
  CHECK_THROWS_WITH(alpaca_source("[{\"instruction\": \"a\", \"output\": 5}]", 300),
                    Catch::Contains("element 0: \"output\" is number, not a string"));
  CHECK_THROWS_WITH(alpaca_source("[{\"instruction\": \"a\",", 300),
                    Catch::Contains("test.toml:5:8: data.path") && Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(alpaca_source("{\"instruction\": \"a\", \"output\": \"b\"}\n{oops}\n", 300, "data.jsonl"),
                    Catch::Contains("data.jsonl line 2") && Catch::Contains("not valid JSON"));
  CHECK_THROWS_WITH(alpaca_source("[]", 300), Catch::Contains("holds no examples"));
}
