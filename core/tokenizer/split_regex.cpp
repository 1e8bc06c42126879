// The matcher: the program (split_regex_compile.cpp) run with an explicit stack of choice points,
// trying each start position in turn as Oniguruma's search does.
#include "tokenizer/split_regex.hpp"

#include "runtime/error.hpp"
#include "tokenizer/unicode.hpp"


namespace zf {

namespace {

uint32_t ascii_swap_case(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c >= 'A' && c <= 'Z') return c + 32;
  return c;
}

bool is_word(uint8_t category) {
  Category c = Category(category);
  return (c >= Category::Lu && c <= Category::Me) || c == Category::Nd || c == Category::Pc;
}

}  // namespace

bool SplitRegex::Class::matches(uint32_t c, uint8_t category) const {
  bool found = false;
  for (const Item &item : items) {
    bool hit = false;
    switch (item.kind) {
      case Item::range:
        hit = (c >= item.first && c <= item.last) ||
              (ignore_case && ascii_swap_case(c) >= item.first && ascii_swap_case(c) <= item.last);
        break;
      case Item::categories: hit = (item.mask >> category) & 1u; break;
      case Item::space: hit = is_whitespace(c); break;
      case Item::word: hit = is_word(category); break;
      case Item::any_but_newline: hit = c != '\n'; break;
    }
    if (hit != item.negated) {
      found = true;
      break;
    }
  }
  return found != negated;
}

SplitRegex SplitRegex::literal(const std::string &text) {
  SplitRegex regex;
  regex.pattern_ = text;
  for (size_t position = 0; position < text.size();) {
    CodePoint c = decode_utf8(text, position);
    Class cls;
    cls.items.push_back({Item::range, false, c.value, c.value, 0});
    regex.classes_.push_back(cls);
    regex.program_.push_back({Inst::character, int32_t(regex.classes_.size()) - 1, 0});
    position += c.length;
  }
  regex.program_.push_back({Inst::match, 0, 0});
  return regex;
}

namespace {

struct Decoded {
  std::vector<uint32_t> value;
  std::vector<uint8_t> category;
  std::vector<size_t> offset;  // size() + 1 entries
};

using Choices = std::vector<std::pair<int32_t, size_t>>;

// The end (a character index) of the program's first match from `pc` at `start`, or -1. Choice
// points go on `choices` above its size at the call, which is what the call leaves.
int64_t run(const std::vector<SplitRegex::Inst> &program, const std::vector<SplitRegex::Class> &classes,
            const Decoded &text, int32_t pc, size_t start, Choices &choices) {
  using Inst = SplitRegex::Inst;
  const size_t base = choices.size();
  size_t at = start;
  const size_t n = text.value.size();
  while (true) {
    const Inst &inst = program[size_t(pc)];
    bool ok = true;
    switch (inst.op) {
      case Inst::match:
        choices.resize(base);
        return int64_t(at);
      case Inst::character:
        ok = at < n && classes[size_t(inst.x)].matches(text.value[at], text.category[at]);
        if (ok) ++at, ++pc;
        break;
      case Inst::split:
        choices.emplace_back(inst.y, at);
        pc = inst.x;
        break;
      case Inst::jump: pc = inst.x; break;
      case Inst::look_ahead:
      case Inst::look_ahead_not:
        ok = (run(program, classes, text, pc + 1, at, choices) >= 0) == (inst.op == Inst::look_ahead);
        pc = inst.x;
        break;
      case Inst::atomic: {
        int64_t end = run(program, classes, text, pc + 1, at, choices);
        ok = end >= 0;
        if (ok) at = size_t(end);
        pc = inst.x;
        break;
      }
    }
    if (ok) continue;
    if (choices.size() == base) return -1;
    pc = choices.back().first;
    at = choices.back().second;
    choices.pop_back();
  }
}

}  // namespace

std::vector<std::pair<size_t, size_t>> SplitRegex::find_all(const std::string &text) const {
  Decoded decoded;
  for (size_t position = 0; position < text.size();) {
    CodePoint c = decode_utf8(text, position);
    decoded.value.push_back(c.value);
    decoded.category.push_back(uint8_t(category(c.value)));
    decoded.offset.push_back(position);
    position += c.length;
  }
  decoded.offset.push_back(text.size());
  std::vector<std::pair<size_t, size_t>> matches;
  Choices choices;
  for (size_t start = 0; start < decoded.value.size();) {
    int64_t end = run(program_, classes_, decoded, 0, start, choices);
    if (end > int64_t(start)) {
      matches.emplace_back(decoded.offset[start], decoded.offset[size_t(end)]);
      start = size_t(end);
    } else {
      ++start;
    }
  }
  return matches;
}

}  // namespace zf
