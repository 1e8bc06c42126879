// split_regex.hpp: the regular expressions of tokenizer.json's Split pre-tokenizers (GPT-2's,
// Qwen2's, Llama-3's, Qwen3.5's, Tekken's, o200k's, ...), matched as Oniguruma does for Hugging
// Face tokenizers: leftmost match, alternatives in order, greedy/lazy/possessive quantifiers with
// backtracking. What it reads: literals and escapes (\r \n \t \f \v \xHH \x{H..} \uHHHH, escaped
// punctuation), `.`, classes [...] with ranges and negation, \s \S \d \D \w \W, \p{..} \P{..} of
// the Unicode general categories (L, Lu, M, N, Nd, P, S, Z, ...), groups (...) (?:...) (?i:...)
// (?=...) (?!...) (?>...), quantifiers ? * + {n} {n,} {n,m} with ? or + after them, and
// alternation. (?i) folds ASCII letters only. Anything else is refused when the pattern is read.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class SplitRegex {
 public:
  // Throws zf::Error saying what at which offset of the pattern is not read.
  explicit SplitRegex(const std::string &pattern);
  // The pattern that matches `text` literally.
  static SplitRegex literal(const std::string &text);

  // Byte ranges [begin, end) of the non-empty matches in text, left to right, each search
  // starting where the last match ended (a find-all).
  std::vector<std::pair<size_t, size_t>> find_all(const std::string &text) const;
  const std::string &pattern() const { return pattern_; }

  struct Item {  // one member of a class: a range of code points or a predicate
    enum Kind : uint8_t { range, categories, space, word, any_but_newline } kind = range;
    bool negated = false;
    uint32_t first = 0, last = 0;  // range
    uint32_t mask = 0;             // categories: one bit per zf::Category
  };
  struct Class {
    std::vector<Item> items;
    bool negated = false, ignore_case = false;
    bool matches(uint32_t code_point, uint8_t category) const;
  };
  struct Inst {
    enum Op : uint8_t { match, character, split, jump, look_ahead, look_ahead_not, atomic } op = match;
    int32_t x = 0, y = 0;  // targets; character: the class index
  };

 private:
  SplitRegex() = default;
  friend class RegexCompiler;
  std::string pattern_;
  std::vector<Class> classes_;
  std::vector<Inst> program_;
};

}  // namespace zf
