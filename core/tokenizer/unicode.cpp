#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <iterator>

namespace zf {
namespace {

struct CodeRange {
  uint32_t first, last;
};

#include "tokenizer/unicode_tables.inc"

template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], uint32_t code_point) {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), code_point,
                             [](uint32_t value, const CodeRange &range) { return value < range.first; });
  return it != std::begin(ranges) && code_point <= std::prev(it)->last;
}

}  // namespace

CodePoint decode_utf8(const std::string &text, size_t position) {
  // An invalid byte stands alone as U+FFFD (a symbol: neither letter, number nor space).
  const CodePoint invalid{0xFFFD, 1, false};
  uint8_t lead = uint8_t(text[position]);
  if (lead < 0x80) return {lead, 1, true};
  size_t length = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
  if (length == 0 || position + length > text.size()) return invalid;
  uint32_t value = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    uint8_t next = uint8_t(text[position + i]);
    if ((next & 0xC0) != 0x80) return invalid;
    value = (value << 6) | (next & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  static const uint32_t minimum[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (value < minimum[length] || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) return invalid;
  return {value, length, true};
}

std::string encode_utf8(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out += char(c);
  } else if (c < 0x800) {
    out += char(0xC0 | (c >> 6));
    out += char(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += char(0xE0 | (c >> 12));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  } else {
    out += char(0xF0 | (c >> 18));
    out += char(0x80 | ((c >> 12) & 0x3F));
    out += char(0x80 | ((c >> 6) & 0x3F));
    out += char(0x80 | (c & 0x3F));
  }
  return out;
}

bool is_letter(uint32_t code_point) { return in_ranges(kLetterRanges, code_point); }
bool is_number(uint32_t code_point) { return in_ranges(kNumberRanges, code_point); }

bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace zf
