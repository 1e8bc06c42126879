// tokenizer_export.hpp: the tokenizer files an export carries, so that transformers' AutoTokenizer
// encodes text to the ids the model was trained on. A Hugging Face or SentencePiece tokenizer has
// files of its own, which the export copies (model/hf_checkpoint.cpp); the built-in byte tokenizer
// has none and is written here: a byte-level BPE without merges, whose 256 tokens are the bytes
// (byte b is id b, spelled as in GPT-2's byte-to-unicode table) and whose id 256 is the special
// end-of-text token "<|endoftext|>" where the model has a row for it (vocab 257; a vocab-256 model's
// tokenizer has the bytes only).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace zf {

class RunConfig;

// name -> contents: tokenizer.json and tokenizer_config.json when [data] reads text with the byte
// tokenizer; empty otherwise (the export copies the tokenizer's own files instead).
std::vector<std::pair<std::string, std::string>> exported_tokenizer_files(const RunConfig &config);

// The byte tokenizer's two files (exported_tokenizer_files' for data.tokenizer = "byte"), with EOS
// (id 256) or without.
std::vector<std::pair<std::string, std::string>> byte_tokenizer_files(bool eos);

}  // namespace zf
