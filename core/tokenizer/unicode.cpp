#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <array>
#include <iterator>

namespace zf {
namespace {

struct CategoryRange {
  uint32_t first, last;
  uint8_t category;
};

#include "tokenizer/unicode_tables.inc"

const char *const kCategoryNames[] = {"Cn", "Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Me", "Nd",
                                      "Nl", "No", "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po", "Sm",
                                      "Sc", "Sk", "So", "Zs", "Zl", "Zp", "Cc", "Cf", "Cs", "Co"};

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

std::string valid_utf8(const std::string &bytes) {
  static const std::string replacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  for (size_t i = 0; i < bytes.size();) {
    const uint8_t lead = uint8_t(bytes[i]);
    if (lead < 0x80) {
      out += char(lead);
      ++i;
      continue;
    }
    // Continuation bytes needed, and the range of the first one (Unicode's table 3-7).
    int need = 0;
    uint8_t low = 0x80, high = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) need = 1;
    else if (lead == 0xE0) need = 2, low = 0xA0;
    else if (lead == 0xED) need = 2, high = 0x9F;
    else if (lead >= 0xE1 && lead <= 0xEF) need = 2;
    else if (lead == 0xF0) need = 3, low = 0x90;
    else if (lead == 0xF4) need = 3, high = 0x8F;
    else if (lead >= 0xF1 && lead <= 0xF3) need = 3;
    size_t end = i + 1;
    int have = 0;
    for (; need > 0 && have < need && end < bytes.size(); ++have, ++end) {
      const uint8_t next = uint8_t(bytes[end]);
      if (next < (have == 0 ? low : 0x80) || next > (have == 0 ? high : 0xBF)) break;
    }
    if (need > 0 && have == need) out.append(bytes, i, end - i);
    else out += replacement;  // the lead and the continuation bytes that fit: one replacement
    i = end;
  }
  return out;
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

Category category(uint32_t code_point) {
  // Latin-1 is most of most text: a table, filled once from the ranges.
  static const auto latin1 = [] {
    std::array<uint8_t, 256> table{};
    for (const CategoryRange &range : kCategoryRanges)
      for (uint32_t c = range.first; c <= range.last && c < 256; ++c) table[c] = range.category;
    return table;
  }();
  if (code_point < 256) return Category(latin1[code_point]);
  auto it = std::upper_bound(std::begin(kCategoryRanges), std::end(kCategoryRanges), code_point,
                             [](uint32_t value, const CategoryRange &range) { return value < range.first; });
  if (it == std::begin(kCategoryRanges) || code_point > std::prev(it)->last) return Category::Cn;
  return Category(std::prev(it)->category);
}

uint32_t category_mask(const std::string &name) {
  uint32_t mask = 0;
  for (size_t i = 1; i < std::size(kCategoryNames); ++i)  // Cn (unassigned) only by its full name
    if (name == kCategoryNames[i] || (name.size() == 1 && name[0] == kCategoryNames[i][0])) mask |= 1u << i;
  if (name == "Cn") mask |= 1u;
  if (name == "C") mask |= 1u;
  return mask;
}

bool is_letter(uint32_t code_point) {
  Category c = category(code_point);
  return c >= Category::Lu && c <= Category::Lo;
}
bool is_number(uint32_t code_point) {
  Category c = category(code_point);
  return c >= Category::Nd && c <= Category::No;
}

bool is_whitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace zf
