// pretokenizer.hpp: the split patterns that byte-level BPE tokenizers apply before BPE, and the
// Split pre-tokenizer's ways of keeping a pattern's matches (split_regex.hpp matches them).
#pragma once

#include "tokenizer/split_regex.hpp"

#include <string>
#include <utility>
#include <vector>

namespace zf {

// Patterns zfcore knows by name (a tokenizer.json may use any pattern split_regex.hpp reads).
enum class SplitPattern {
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ (ByteLevel's use_regex)
  qwen2,   // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  llama3,  // the Qwen2 pattern with \p{N}{1,3} (also cl100k's: OLMo 2, Phi-4)
};

const std::string &split_pattern_regex(SplitPattern pattern);
const SplitRegex &split_pattern(SplitPattern pattern);  // compiled once

// How Split keeps the matches of its pattern (tokenizer.json's "behavior").
enum class SplitBehavior { isolated, removed, merged_with_previous, merged_with_next };

// Byte ranges [begin, end) of the pieces text splits into; empty pieces are dropped.
std::vector<std::pair<size_t, size_t>> split_pieces(const std::string &text, const SplitRegex &regex,
                                                    SplitBehavior behavior);
// split_pieces with `isolated`: the pre-tokens of a byte-level pattern, which cover text exactly.
std::vector<std::pair<size_t, size_t>> pretokenize(const std::string &text, SplitPattern pattern);

}  // namespace zf
