// The scanners follow the regex alternatives in order; where a greedy run must give back a
// character (\s+(?!\S), \s*[\r\n]+) the comment says which one the regex's backtracking keeps.
#include "tokenizer/pretokenizer.hpp"

#include "tokenizer/unicode.hpp"

#include <cstdint>

namespace zf {
namespace {

enum class Class : uint8_t { letter, number, space, other };

// The text decoded once: one entry per character, plus the byte offset where each starts.
struct Characters {
  std::vector<uint32_t> value;
  std::vector<Class> type;
  std::vector<size_t> offset;  // size() + 1 entries; the last is the text's length

  explicit Characters(const std::string &text) {
    for (size_t position = 0; position < text.size();) {
      CodePoint c = decode_utf8(text, position);
      value.push_back(c.value);
      type.push_back(is_letter(c.value) ? Class::letter
                     : is_number(c.value) ? Class::number
                     : is_whitespace(c.value) ? Class::space
                                              : Class::other);
      offset.push_back(position);
      position += c.length;
    }
    offset.push_back(text.size());
  }
  size_t size() const { return value.size(); }
  bool is(size_t i, Class c) const { return i < size() && type[i] == c; }
  bool is_newline(size_t i) const { return i < size() && (value[i] == '\r' || value[i] == '\n'); }
};

// Lower-cases ASCII only: the contractions are ASCII, and (?i:) matters only for their letters.
uint32_t fold(uint32_t c, bool ignore_case) { return ignore_case && c >= 'A' && c <= 'Z' ? c + 32 : c; }

// Length of the contraction ('s 't 're 've 'm 'll 'd) at i, or 0.
size_t contraction(const Characters &text, size_t i, bool ignore_case) {
  if (text.value[i] != '\'' || i + 1 >= text.size()) return 0;
  uint32_t a = fold(text.value[i + 1], ignore_case);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (i + 2 >= text.size()) return 0;
  uint32_t b = fold(text.value[i + 2], ignore_case);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

size_t run(const Characters &text, size_t i, Class c) {
  while (text.is(i, c)) ++i;
  return i;
}

// \s+(?!\S)|\s+ at i (a space): the whole run at the end of the text; otherwise the run less its
// last character (which then starts the next word, e.g. " world"), unless that leaves nothing.
size_t trailing_space(const Characters &text, size_t i) {
  size_t end = run(text, i, Class::space);
  if (end == text.size()) return end;
  return end - i >= 2 ? end - 1 : end;
}

size_t match_gpt2(const Characters &text, size_t i) {
  if (size_t n = contraction(text, i, false)) return i + n;
  // ` ?X+` for X in letters, numbers, other: an optional ASCII space, then a run of one class.
  size_t j = text.value[i] == ' ' ? i + 1 : i;
  if (j < text.size() && text.type[j] != Class::space) return run(text, j, text.type[j]);
  return trailing_space(text, i);
}

size_t match_qwen2(const Characters &text, size_t i, size_t max_digits) {
  if (size_t n = contraction(text, i, true)) return i + n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (text.is(i, Class::letter)) return run(text, i, Class::letter);
  if (!text.is_newline(i) && !text.is(i, Class::number) && text.is(i + 1, Class::letter))
    return run(text, i + 1, Class::letter);
  // \p{N}{1,max}
  if (text.is(i, Class::number)) {
    size_t j = i;
    while (j - i < max_digits && text.is(j, Class::number)) ++j;
    return j;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  size_t j = text.value[i] == ' ' ? i + 1 : i;
  if (text.is(j, Class::other)) {
    j = run(text, j, Class::other);
    while (text.is_newline(j)) ++j;
    return j;
  }
  // \s*[\r\n]+: greedy \s* gives back characters until one is a newline, so the match ends just
  // after the last newline of the whitespace run.
  size_t end = run(text, i, Class::space);
  for (size_t k = end; k > i; --k)
    if (text.is_newline(k - 1)) return k;
  return trailing_space(text, i);
}

}  // namespace

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

std::optional<SplitPattern> recognize_split_pattern(const std::string &regex) {
  for (SplitPattern pattern : {SplitPattern::gpt2, SplitPattern::qwen2, SplitPattern::llama3})
    if (split_pattern_regex(pattern) == regex) return pattern;
  return std::nullopt;
}

const char *split_pattern_name(SplitPattern pattern) {
  switch (pattern) {
    case SplitPattern::gpt2: return "gpt2";
    case SplitPattern::qwen2: return "qwen2";
    case SplitPattern::llama3: return "llama3";
  }
  return "?";
}

std::vector<std::pair<size_t, size_t>> pretokenize(const std::string &text, SplitPattern pattern) {
  Characters characters(text);
  std::vector<std::pair<size_t, size_t>> words;
  for (size_t i = 0; i < characters.size();) {
    size_t end = pattern == SplitPattern::gpt2     ? match_gpt2(characters, i)
                 : pattern == SplitPattern::qwen2 ? match_qwen2(characters, i, 1)
                                                   : match_qwen2(characters, i, 3);
    words.emplace_back(characters.offset[i], characters.offset[end]);
    i = end;
  }
  return words;
}

}  // namespace zf
