// pretokenizer.hpp: the split patterns byte-level BPE tokenizers apply before BPE, as hand-written
// scanners (std::regex has no \p{L}). Each scanner returns exactly the matches the pattern's
// regex would find, left to right, so the BPE sees the same words as Hugging Face tokenizers.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zf {

enum class SplitPattern {
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  qwen2,   // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,  // the Qwen2 pattern with \p{N}{1,3} (numbers split into groups of up to three digits)
};

// The regex text of each pattern, as tokenizer.json files spell it.
const std::string &split_pattern_regex(SplitPattern pattern);
// The pattern whose regex is exactly `regex`, if it is one of the above.
std::optional<SplitPattern> recognize_split_pattern(const std::string &regex);
const char *split_pattern_name(SplitPattern pattern);

// Byte ranges [begin, end) of the pre-tokens of text; together they cover text exactly.
std::vector<std::pair<size_t, size_t>> pretokenize(const std::string &text, SplitPattern pattern);

}  // namespace zf
