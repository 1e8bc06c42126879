// Tokenizers without fixtures: the byte tokenizer round-trips any bytes; the split patterns cut
// where their regexes do (hand-checked cases; the fixtures test compares with Hugging Face); a
// hand-written tokenizer.json shows merges applied by rank, added tokens matched before BPE and
// decoding back to bytes; config errors name the key.
#include "data/data_test_support.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"
#include "tokenizer/byte_level.hpp"
#include "tokenizer/nfc.hpp"
#include "tokenizer/pretokenizer.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer/unicode.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <random>

using namespace zf;

namespace {

std::vector<std::string> words(const std::string &text, SplitPattern pattern) {
  std::vector<std::string> out;
  for (const auto &[begin, end] : pretokenize(text, pattern)) out.push_back(text.substr(begin, end - begin));
  return out;
}

using Words = std::vector<std::string>;

// A tiny byte-level BPE: merges a+b, b+c, ab+c, Ġ+ab in that order (or with the first two swapped).
std::string tiny_tokenizer(const std::string &directory, bool swap_first_merges, const std::string &unk = "null") {
  std::string merges = swap_first_merges ? R"("b c", "a b")" : R"("a b", "b c")";
  std::string path = directory + "/tokenizer.json";
  test::write_file(path, R"({
  "version": "1.0",
  "added_tokens": [
    {"id": 9, "content": "<|end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 10, "content": "<sep>", "single_word": false, "lstrip": true, "rstrip": true, "normalized": false, "special": true}
  ],
  "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null,
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "unk_token": )" + unk + R"(, "fuse_unk": false,
    "vocab": {"a": 0, "b": 1, "c": 2, "Ġ": 3, "ab": 4, "bc": 5, "abc": 6, "Ġab": 7, "?": 8},
    "merges": [)" + merges + R"(, "ab c", "Ġ ab"]}
})");
  return path;
}

}  // namespace

TEST_CASE("byte tokenizer: one id per byte, any bytes round-trip, EOS is 256", "[data]") {
  auto tokenizer = make_byte_tokenizer(true);
  CHECK(tokenizer->vocab_size() == 257);
  CHECK(tokenizer->eos_id() == 256);
  CHECK_FALSE(tokenizer->bos_id());
  CHECK(make_byte_tokenizer(false)->vocab_size() == 256);
  CHECK_FALSE(make_byte_tokenizer(false)->eos_id());

  std::string utf8 = "naïve café, 日本語, 🙂";
  std::vector<int64_t> ids = tokenizer->encode(utf8);
  CHECK(ids.size() == utf8.size());
  CHECK((ids[2] == 0xC3 && ids[3] == 0xAF));  // "ï" is C3 AF
  CHECK(tokenizer->decode(ids) == utf8);

  std::string invalid = "\xff\xfe\x80 broken \xc3( \xed\xa0\x80";
  CHECK(tokenizer->decode(tokenizer->encode(invalid)) == invalid);

  std::mt19937 random(7);
  std::string bytes(4096, '\0');
  for (char &b : bytes) b = char(random() & 0xFF);
  CHECK(tokenizer->decode(tokenizer->encode(bytes)) == bytes);

  std::vector<int64_t> with_eos = tokenizer->encode("ab");
  with_eos.push_back(256);
  CHECK(tokenizer->decode(with_eos) == "ab");
  CHECK_THROWS_WITH(tokenizer->decode({300}), Catch::Contains("token id 300"));
}

TEST_CASE("byte-level table: printable bytes are themselves, the rest start at U+0100", "[data]") {
  CHECK(byte_level_char('a') == "a");
  CHECK(byte_level_char(' ') == "Ġ");   // U+0120
  CHECK(byte_level_char('\n') == "Ċ");  // U+010A
  CHECK(byte_level_char(0) == "Ā");     // U+0100
  for (int b = 0; b < 256; ++b) {
    std::string spelled = byte_level_char(uint8_t(b));
    uint32_t code_point = spelled.size() == 1 ? uint8_t(spelled[0]) : ((uint8_t(spelled[0]) & 0x1F) << 6) | (uint8_t(spelled[1]) & 0x3F);
    CHECK(byte_level_byte(code_point) == b);
  }
}

TEST_CASE("GPT-2 split pattern: words, contractions, numbers, punctuation and spaces", "[data]") {
  CHECK(words("Hello world", SplitPattern::gpt2) == Words{"Hello", " world"});
  CHECK(words("I'm don't", SplitPattern::gpt2) == Words{"I", "'m", " don", "'t"});
  CHECK(words("a  b", SplitPattern::gpt2) == Words{"a", " ", " b"});
  CHECK(words("a\n\nb", SplitPattern::gpt2) == Words{"a", "\n", "\n", "b"});
  CHECK(words("end  ", SplitPattern::gpt2) == Words{"end", "  "});
  CHECK(words("x123abc 45!?", SplitPattern::gpt2) == Words{"x", "123", "abc", " 45", "!?"});
  CHECK(words("héllo wörld", SplitPattern::gpt2) == Words{"héllo", " wörld"});
  CHECK(words("I'M", SplitPattern::gpt2) == Words{"I", "'", "M"});  // GPT-2's contractions are lower case
  CHECK(words("", SplitPattern::gpt2).empty());
  // Invalid UTF-8 bytes are symbols; the words still cover every byte.
  CHECK(words("a\xff\xfe b", SplitPattern::gpt2) == Words{"a", "\xff\xfe", " b"});
}

TEST_CASE("Qwen2 and Llama-3 split patterns: single digits or groups of three, newlines", "[data]") {
  CHECK(words("12345", SplitPattern::qwen2) == Words{"1", "2", "3", "4", "5"});
  CHECK(words("12345", SplitPattern::llama3) == Words{"123", "45"});
  CHECK(words("IT'S", SplitPattern::qwen2) == Words{"IT", "'S"});
  CHECK(words("x.\nY", SplitPattern::qwen2) == Words{"x", ".\n", "Y"});
  CHECK(words("a\n\n  b", SplitPattern::qwen2) == Words{"a", "\n\n", " ", " b"});
  CHECK(words("$hello", SplitPattern::qwen2) == Words{"$hello"});
}

TEST_CASE("split regex: classes of categories, look-ahead, possessive and lazy quantifiers", "[tokenizer]") {
  auto matches = [](const std::string &pattern, const std::string &text) {
    std::vector<std::string> out;
    for (const auto &[begin, end] : SplitRegex(pattern).find_all(text)) out.push_back(text.substr(begin, end - begin));
    return out;
  };
  // Tekken's cased words: upper-case letters, then lower-case ones.
  CHECK(matches(R"([\p{Lu}\p{Lt}]*[\p{Ll}]+|[\p{Lu}]+)", "McDonaldHTTP") == Words{"Mc", "Donald", "HTTP"});
  CHECK(matches(R"(\p{L}[\p{L}\p{M}]*)", "हिंदी") == Words{"हिंदी"});  // marks join the word
  CHECK(matches(R"(\p{L}+)", "हिंदी") == Words{"ह", "द"});            // without them, letters alone
  CHECK(matches(R"(\s+(?!\S)|\s+)", "a   b") == Words{"  ", " "});
  CHECK(matches(R"(a.*?b)", "aXbYb") == Words{"aXb"});
  CHECK(matches(R"(x?+x)", "xx") == Words{"xx"});
  CHECK(matches(R"((?>a*)a|b)", "aaab") == Words{"b"});  // the atomic group gives nothing back
  CHECK(matches(R"(\p{N}{1,3})", "12345") == Words{"123", "45"});
  CHECK(matches(R"((?i:'s|'ll))", "IT'S we'LL") == Words{"'S", "'LL"});
  CHECK(matches(R"([^\r\n/]+|/)", "a/b") == Words{"a", "/", "b"});
  CHECK_THROWS_WITH(SplitRegex(R"((?<=a)b)"), Catch::Contains("(?<") && Catch::Contains("character 2"));
  CHECK_THROWS_WITH(SplitRegex(R"(\p{Greek})"), Catch::Contains("\\p{Greek}"));
  CHECK_THROWS_WITH(SplitRegex(R"([\p{L}&&[^a]])"), Catch::Contains("&&"));
  CHECK_THROWS_WITH(SplitRegex(R"((a*)*b)"), Catch::Contains("can match nothing"));  // it would loop forever
}

TEST_CASE("NFC composes what Unicode composes and keeps what it excludes", "[tokenizer]") {
  CHECK(to_nfc("cafe\u0301") == "caf\u00e9");
  CHECK(to_nfc("Vie\u0302\u0323t") == "Vi\u1ec7t");      // two marks, reordered by class, then composed
  CHECK(to_nfc("\u1100\u1161\u11a8") == "\uac01");        // Hangul jamo to a syllable
  CHECK(to_nfc("\u2126") == "\u03a9");                     // a singleton decomposition: Ohm sign to Omega
  CHECK(to_nfc("\u0915\u093c") == "\u0915\u093c");         // an exclusion: stays decomposed
  CHECK(to_nfc("a\xff\u0301") == "a\xff\u0301");           // not UTF-8: kept, and composes nothing
  CHECK(to_nfc("plain ascii") == "plain ascii");
}

TEST_CASE("hf tokenizer: merges by rank, added tokens before BPE, decoding to bytes", "[data]") {
  std::string directory = test::scratch_dir("data_tiny_bpe");
  auto tokenizer = load_hf_tokenizer(tiny_tokenizer(directory, false));
  CHECK(tokenizer->vocab_size() == 11);
  CHECK(tokenizer->encode("abc") == std::vector<int64_t>{6});
  CHECK(tokenizer->encode("abab") == std::vector<int64_t>{4, 4});
  CHECK(tokenizer->encode(" ab") == std::vector<int64_t>{7});
  CHECK(tokenizer->encode("a b") == std::vector<int64_t>{0, 3, 1});
  CHECK(tokenizer->encode("ab<|end|>c") == std::vector<int64_t>{4, 9, 2});
  // <sep> strips the spaces around it (lstrip, rstrip).
  CHECK(tokenizer->encode("ab  <sep>  c") == std::vector<int64_t>{4, 10, 2});
  // Without an unk token, characters outside the vocabulary are dropped before merging (as in
  // Hugging Face), so a and b still merge.
  CHECK(tokenizer->encode("azb") == std::vector<int64_t>{4});
  CHECK(tokenizer->decode({7, 9, 2, 3}) == " ab<|end|>c ");
  CHECK_THROWS_WITH(tokenizer->decode({42}), Catch::Contains("token id 42"));

  // The lower rank wins: with b+c first, "abc" is a + bc.
  std::string swapped = test::scratch_dir("data_tiny_bpe_swapped");
  CHECK(load_hf_tokenizer(tiny_tokenizer(swapped, true))->encode("abc") == std::vector<int64_t>{0, 5});

  std::string with_unk = test::scratch_dir("data_tiny_bpe_unk");
  CHECK(load_hf_tokenizer(tiny_tokenizer(with_unk, false, "\"?\""))->encode("azb") == std::vector<int64_t>{0, 8, 1});
}

TEST_CASE("hf tokenizer: unsupported files are refused with the file and the field", "[data]") {
  std::string directory = test::scratch_dir("data_bad_tokenizer");
  std::string path = directory + "/tokenizer.json";
  auto refused = [&](const std::string &text) {
    test::write_file(path, text);
    try {
      load_hf_tokenizer(path);
    } catch (const Error &e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  const std::string bpe = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  std::string message = refused(R"({"model": {"type": "Unigram", "vocab": []}})");
  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("model.type is \"Unigram\"") &&
                          Catch::Contains("data.tokenizer = \"sentencepiece\""));
  message = refused(R"({"pre_tokenizer": {"type": "Metaspace"}, )" + bpe + "}");
  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("pre_tokenizer.type is \"Metaspace\""));
  message = refused(R"({"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "NFKC"}]}, )" + bpe + "}");
  CHECK_THAT(message, Catch::Contains("normalizer.normalizers[1].type is \"NFKC\"") && Catch::Contains("NFC, Replace"));
  message = refused(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(?<=a)b"}, "behavior": "Isolated"}, )" + bpe + "}");
  CHECK_THAT(message, Catch::Contains(path) && Catch::Contains("pre_tokenizer.pattern") && Catch::Contains("(?<"));
  message = refused(R"({"decoder": {"type": "Metaspace"}, )" + bpe + "}");
  CHECK_THAT(message, Catch::Contains("decoder.type is \"Metaspace\""));
  message = refused(R"({"model": {"type": "BPE", "dropout": 0.1, "vocab": {"a": 0}, "merges": []}})");
  CHECK_THAT(message, Catch::Contains("model.dropout"));
  message = refused(R"({"model": {"type": "BPE", "continuing_subword_prefix": "##", "vocab": {"a": 0}, "merges": []}})");
  CHECK_THAT(message, Catch::Contains("model.continuing_subword_prefix is \"##\""));
  CHECK_THAT(refused("{ not json"), Catch::Contains("not valid JSON"));
  CHECK_THAT(refused(R"({"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"),
             Catch::Contains("merge 0"));
}

TEST_CASE("make_tokenizer: byte by default, a missing tokenizer_path is a located error", "[data]") {
  CHECK(make_tokenizer(test::data_config(""))->name() == "byte");
  CHECK_THROWS_WITH(make_tokenizer(test::data_config("tokenizer = \"hf\"")),
                    Catch::Contains("test.toml:4:13") && Catch::Contains("needs data.tokenizer_path"));
  CHECK_THROWS_WITH(make_tokenizer(test::data_config("tokenizer = \"sentencepiece\"\ntokenizer_path = \"/no/such.model\"")),
                    Catch::Contains("test.toml:5:18") &&
                        Catch::Contains("/no/such.model: No such file or directory"));
  std::string directory = test::scratch_dir("data_tokenizer_dir");
  tiny_tokenizer(directory, false);
  // A directory stands for the tokenizer.json inside it.
  CHECK(make_tokenizer(test::data_config("tokenizer = \"hf\"\ntokenizer_path = \"" + directory + "\""))->vocab_size() == 11);
  // One that is a FIFO is named as one (reading it would wait for a writer).
  std::string fifo = test::scratch_dir("data_tokenizer_fifo");
  REQUIRE(mkfifo((fifo + "/tokenizer.json").c_str(), 0644) == 0);
  CHECK_THROWS_WITH(make_tokenizer(test::data_config("tokenizer = \"hf\"\ntokenizer_path = \"" + fifo + "\"")),
                    Catch::Contains(fifo + "/tokenizer.json: is a FIFO"));
}

TEST_CASE("valid_utf8 replaces what is not UTF-8 as Python's errors=\"replace\" does", "[tokenizer]") {
  // Expected: bytes.decode("utf-8", "replace").encode() in CPython.
  const std::string r = "\xEF\xBF\xBD";
  const std::pair<std::string, std::string> cases[] = {
      {"plain \xE2\x82\xAC", "plain \xE2\x82\xAC"},  // valid, untouched
      {"\xE2\x82", r},                                  // a character cut short: one replacement
      {"a\xD2" "b", "a" + r + "b"},
      {"\xF0\x9F\x98", r},
      {"\xED\xA0\x80", r + r + r},  // a surrogate
      {"\xC0\xAF", r + r},           // an overlong form
      {"\xF4\x90\x80\x80", r + r + r + r},
      {"\xE0\x80\x80", r + r + r}};
  for (const auto &[in, out] : cases) CHECK(valid_utf8(in) == out);
}
