#include "tokenizer/pretokenizer.hpp"

namespace zf {

const std::string &split_pattern_regex(SplitPattern pattern) {
  static const std::string gpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  static const std::string qwen2 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  static const std::string llama3 =
      R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  switch (pattern) {
    case SplitPattern::gpt2: return gpt2;
    case SplitPattern::qwen2: return qwen2;
    case SplitPattern::llama3: return llama3;
  }
  return gpt2;
}

const SplitRegex &split_pattern(SplitPattern pattern) {
  static const SplitRegex gpt2(split_pattern_regex(SplitPattern::gpt2));
  static const SplitRegex qwen2(split_pattern_regex(SplitPattern::qwen2));
  static const SplitRegex llama3(split_pattern_regex(SplitPattern::llama3));
  return pattern == SplitPattern::gpt2 ? gpt2 : pattern == SplitPattern::qwen2 ? qwen2 : llama3;
}

std::vector<std::pair<size_t, size_t>> split_pieces(const std::string &text, const SplitRegex &regex,
                                                    SplitBehavior behavior) {
  // Alternating gaps and matches, each marked, then kept or joined as the behavior says.
  struct Piece {
    size_t begin, end;
    bool match;
  };
  std::vector<Piece> pieces;
  size_t last = 0;
  for (const auto &[begin, end] : regex.find_all(text)) {
    if (begin > last) pieces.push_back({last, begin, false});
    pieces.push_back({begin, end, true});
    last = end;
  }
  if (last < text.size()) pieces.push_back({last, text.size(), false});

  std::vector<std::pair<size_t, size_t>> out;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece &piece = pieces[i];
    switch (behavior) {
      case SplitBehavior::isolated: out.emplace_back(piece.begin, piece.end); break;
      case SplitBehavior::removed:
        if (!piece.match) out.emplace_back(piece.begin, piece.end);
        break;
      case SplitBehavior::merged_with_previous:  // a match ends the gap before it
        if (piece.match && i > 0 && !pieces[i - 1].match) out.back().second = piece.end;
        else out.emplace_back(piece.begin, piece.end);
        break;
      case SplitBehavior::merged_with_next:  // a match starts the gap after it
        if (!piece.match && i > 0 && pieces[i - 1].match) out.back().second = piece.end;
        else out.emplace_back(piece.begin, piece.end);
        break;
    }
  }
  return out;
}

std::vector<std::pair<size_t, size_t>> pretokenize(const std::string &text, SplitPattern pattern) {
  return split_pieces(text, split_pattern(pattern), SplitBehavior::isolated);
}

}  // namespace zf
