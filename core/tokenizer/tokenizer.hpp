// tokenizer.hpp: text <-> token ids. Three kinds, chosen by [data] tokenizer:
//   byte           built in: one token per byte (ids 0..255) plus EOS = 256, vocab 257
//   hf             a Hugging Face tokenizer.json holding a BPE (byte-level, or SentencePiece-style
//                  with byte fallback): hf_tokenizer.cpp
//   sentencepiece  a SentencePiece model file (Llama-2's tokenizer.model), through libsentencepiece
// Pure C++: no libtorch here, so tokenizers build fast and run in tools and tests alike.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zf {

class RunConfig;

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  virtual std::string name() const = 0;  // "byte", "hf:<path>", "sentencepiece:<path>"
  // The ids of the text alone: no BOS or EOS is added (callers add bos_id()/eos_id() themselves).
  virtual std::vector<int64_t> encode(const std::string &text) const = 0;
  // Ids outside the vocabulary throw zf::Error.
  virtual std::string decode(const std::vector<int64_t> &ids) const = 0;
  virtual int64_t vocab_size() const = 0;  // every id is below it
  virtual std::optional<int64_t> eos_id() const = 0;
  // Present when the tokenizer's own convention starts every sequence with it (Llama's <s>,
  // Llama-3's <|begin_of_text|>); absent for GPT-2 style tokenizers.
  virtual std::optional<int64_t> bos_id() const = 0;
  virtual std::optional<int64_t> pad_id() const = 0;
};

// The tokenizer [data] asks for: `tokenizer` (byte|hf|sentencepiece) and `tokenizer_path`.
std::unique_ptr<Tokenizer> make_tokenizer(const RunConfig &config);

// Bytes as tokens. With eos, id 256 is an end-of-sequence token (decoded as nothing), vocab 257.
std::unique_ptr<Tokenizer> make_byte_tokenizer(bool eos = true);
// `path` is a tokenizer.json (a tokenizer_config.json beside it, if any, names EOS and PAD).
std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string &path);
// The same from the text of a tokenizer.json and of the tokenizer_config.json beside it (nullopt:
// none); `path` stands in for the file's path in messages.
std::unique_ptr<Tokenizer> parse_hf_tokenizer(const std::string &text, const std::optional<std::string> &config_text,
                                              const std::string &path);
std::unique_ptr<Tokenizer> load_sentencepiece_tokenizer(const std::string &path);

}  // namespace zf
