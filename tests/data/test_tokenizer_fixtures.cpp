// Tokenizers against Hugging Face and SentencePiece: the ids each library gave for the same texts
// (tests/fixtures/tokenizers, written by tools/make_fixtures.py, make_split_fixtures.py and
// make_family_fixtures.py there).
// Skipped with a warning when a fixture is missing.
#include "data/data_test_support.hpp"
#include "support/process.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>

using namespace zf;
using nlohmann::json;

namespace {

json read_json(const std::string &path) {
  std::ifstream stream(path);
  return json::parse(stream);
}

std::vector<int64_t> ids_of(const json &array) { return array.get<std::vector<int64_t>>(); }

}  // namespace

TEST_CASE("hf tokenizer (GPT-2 pre-tokenizer) gives Hugging Face's ids and decodes back", "[data]") {
  std::string model = test::tokenizer_fixture("bpe/tokenizer.json");
  std::string cases = test::tokenizer_fixture("cases.json");
  if (model.empty() || cases.empty()) return;
  auto tokenizer = load_hf_tokenizer(model);
  CHECK(tokenizer->eos_id() == 0);  // <|endoftext|>, found by name without a tokenizer_config.json
  int checked = 0;
  for (const json &c : read_json(cases)) {
    std::string text = c.at("text");
    INFO("text: " << text);
    CHECK(tokenizer->encode(text) == ids_of(c.at("bpe_ids")));
    CHECK(tokenizer->decode(ids_of(c.at("bpe_ids"))) == c.at("bpe_decoded").get<std::string>());
    ++checked;
  }
  CHECK(checked >= 5);
}

TEST_CASE("sentencepiece tokenizer gives SentencePiece's ids and decodes back", "[data]") {
  std::string model = test::tokenizer_fixture("sentencepiece/tokenizer.model");
  std::string cases = test::tokenizer_fixture("cases.json");
  if (model.empty() || cases.empty()) return;
  auto tokenizer = load_sentencepiece_tokenizer(model);
  CHECK(tokenizer->bos_id() == 1);
  CHECK(tokenizer->eos_id() == 2);
  CHECK_FALSE(tokenizer->pad_id());
  for (const json &c : read_json(cases)) {
    std::string text = c.at("text");
    INFO("text: " << text);
    CHECK(tokenizer->encode(text) == ids_of(c.at("sp_ids")));
    CHECK(tokenizer->decode(ids_of(c.at("sp_ids"))) == c.at("sp_decoded").get<std::string>());
  }
}

TEST_CASE("split patterns cut text exactly where Hugging Face's regexes do", "[data]") {
  std::string cases = test::tokenizer_fixture("split_cases.json");
  if (cases.empty()) return;
  for (const json &c : read_json(cases)) {
    std::string name = c.at("pattern"), text = c.at("text");
    SplitPattern pattern = name == "gpt2" ? SplitPattern::gpt2 : name == "qwen2" ? SplitPattern::qwen2 : SplitPattern::llama3;
    std::vector<std::string> words;
    for (const auto &[begin, end] : pretokenize(text, pattern)) words.push_back(text.substr(begin, end - begin));
    INFO(name << " on: " << text);
    CHECK(words == c.at("words").get<std::vector<std::string>>());
  }
}

TEST_CASE("Qwen2 and Llama-3 style tokenizer.json: split, added tokens, EOS and BOS", "[data]") {
  std::string qwen2_path = test::tokenizer_fixture("qwen2_style/tokenizer.json");
  std::string llama3_path = test::tokenizer_fixture("llama3_style/tokenizer.json");
  std::string cases = test::tokenizer_fixture("styled_cases.json");
  if (qwen2_path.empty() || llama3_path.empty() || cases.empty()) return;
  auto qwen2 = load_hf_tokenizer(qwen2_path);
  auto llama3 = load_hf_tokenizer(llama3_path);
  // Qwen2: EOS and PAD from tokenizer_config.json; no BOS. Llama-3: BOS from the template.
  CHECK(qwen2->eos_id() == 2);  // <|im_end|>
  CHECK(qwen2->pad_id() == 0);  // <|endoftext|>
  CHECK_FALSE(qwen2->bos_id());
  CHECK(llama3->bos_id() == 0);
  CHECK(llama3->eos_id() == 1);  // <|end_of_text|>, by name
  for (const json &c : read_json(cases)) {
    std::string text = c.at("text");
    INFO("text: " << text);
    CHECK(qwen2->encode(text) == ids_of(c.at("qwen2_ids")));
    // Hugging Face's ids include the template's BOS; encode() leaves it to the caller.
    std::vector<int64_t> llama3_ids = {*llama3->bos_id()};
    for (int64_t id : llama3->encode(text)) llama3_ids.push_back(id);
    CHECK(llama3_ids == ids_of(c.at("llama3_ids")));
    CHECK(qwen2->decode(qwen2->encode(text)) == text);
  }
}

// Tiny vocabularies with the configuration of each family's published tokenizer.json (see
// make_family_fixtures.py): NFC (Qwen), Qwen3.5's and Tekken's split patterns, Gemma 3's
// SentencePiece-style BPE with byte fallback, Gemma 4's with its <|turn> ... <turn|> special tokens
// (transformers' GemmaTokenizer gives the same ids for both), added tokens special or not, stripping or not.
TEST_CASE("tokenizer.json of Llama 3, Qwen3, Qwen3.5, Gemma 3, Gemma 4, Mistral, OLMo 2, Phi-4: Hugging Face's ids "
          "and text", "[data]") {
  std::string cases_path = test::tokenizer_fixture("families/cases.json");
  if (cases_path.empty()) return;
  json cases = read_json(cases_path);
  const auto texts = cases.at("texts").get<std::vector<std::string>>();
  int families = 0;
  for (const auto &[name, family] : cases.at("families").items()) {
    auto tokenizer = load_hf_tokenizer(test::tokenizer_fixture("families/" + name + "/tokenizer.json"));
    INFO("family: " << name);
    if (family.at("bos").is_null()) CHECK_FALSE(tokenizer->bos_id());
    else CHECK(tokenizer->bos_id() == family.at("bos").get<int64_t>());
    for (size_t i = 0; i < texts.size(); ++i) {
      INFO("text: " << texts[i]);
      CHECK(tokenizer->encode(texts[i]) == ids_of(family.at("ids")[i]));
      CHECK(tokenizer->decode(ids_of(family.at("ids")[i])) == family.at("decoded")[i].get<std::string>());
    }
    ++families;
  }
  CHECK(families == 8);
  CHECK(texts.size() >= 30);
}

TEST_CASE("text source: a file tokenized in blocks gives the ids of the whole file", "[data]") {
  std::string model = test::tokenizer_fixture("bpe/tokenizer.json");
  std::string cases = test::tokenizer_fixture("cases.json");
  if (model.empty() || cases.empty()) return;
  std::string text;
  while (text.size() < (size_t(3) << 20) / 2)  // 1.5 MiB: more than one block
    for (const json &c : read_json(cases)) text += c.at("text").get<std::string>() + "\n";
  std::string directory = test::scratch_dir("data_text_blocks");
  test::write_file(directory + "/corpus.txt", text);
  auto source = make_data_source(test::data_config("type = \"text\"\npath = \"" + directory + "/corpus.txt\"\n"
                                                   "tokenizer = \"hf\"\ntokenizer_path = \"" + model + "\"\n"
                                                   "seq_len = 1024\nshuffle = false"));
  std::vector<int64_t> whole = load_hf_tokenizer(model)->encode(text);
  REQUIRE(source->size() == (int64_t(whole.size()) - 1) / 1024);
  Batch batch = source->batch(0, source->size());
  torch::Tensor expected = torch::tensor(whole, torch::kInt64).slice(0, 0, source->size() * 1024).view({-1, 1024});
  CHECK(torch::equal(batch.inputs, expected));
}
