// Fuzz target: a Hugging Face tokenizer.json, with the tokenizer_config.json beside it when the
// input has a line "--- tokenizer_config.json ---" (what follows it is that file), as
// data.tokenizer_path reads them (parse_hf_tokenizer). An accepted tokenizer must encode any text
// into ids inside its vocabulary, decode them again, and name its special tokens inside it.
#include "fuzz_target.hpp"
#include "tokenizer/tokenizer.hpp"

#include <memory>
#include <optional>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text = zf::fuzz::input_text(data, size);
  const std::string name = "fuzz/tokenizer.json", separator = "\n--- tokenizer_config.json ---\n";
  std::optional<std::string> config;
  if (size_t at = text.find(separator); at != std::string::npos) {
    config = text.substr(at + separator.size());
    text.resize(at);
  }
  std::unique_ptr<zf::Tokenizer> tokenizer;
  // An error names tokenizer.json or tokenizer_config.json, whichever is at fault.
  if (!zf::fuzz::accepts("fuzz/tokenizer", [&] { tokenizer = zf::parse_hf_tokenizer(text, config, name); })) return 0;

  using zf::fuzz::require;
  const int64_t vocab = tokenizer->vocab_size();
  auto inside = [&](std::optional<int64_t> id) { return !id || (*id >= 0 && *id < vocab); };
  require(inside(tokenizer->eos_id()) && inside(tokenizer->bos_id()) && inside(tokenizer->pad_id()),
          "a special token id outside the vocabulary of " + std::to_string(vocab));
  // Text of every kind the pre-tokenizers split on, and the input's own first bytes (any bytes).
  const std::string samples[] = {"Hello, world! It's 2024: 12345 tokens.\n\n  ünïcödé 你好 🙂 <|endoftext|>\t\r\n",
                                 std::string(reinterpret_cast<const char *>(data), std::min<size_t>(size, 64))};
  for (const std::string &sample : samples) {
    std::vector<int64_t> ids;
    zf::fuzz::must_succeed("encode", [&] { ids = tokenizer->encode(sample); });
    for (int64_t id : ids)
      require(id >= 0 && id < vocab, "encode gave id " + std::to_string(id) + ", outside the vocabulary of " +
                                         std::to_string(vocab));
    zf::fuzz::must_succeed("decode", [&] { tokenizer->decode(ids); });
  }
  return 0;
}
