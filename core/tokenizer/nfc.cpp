#include "tokenizer/nfc.hpp"

#include "tokenizer/unicode.hpp"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

namespace zf {
namespace {

struct CombiningRange {
  uint32_t first, last;
  uint8_t ccc;
};
struct Decomposition {
  uint32_t code_point, first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};

#include "tokenizer/nfc_tables.inc"

// Hangul syllables decompose and compose by arithmetic (Unicode 3.12).
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

uint8_t combining_class(uint32_t c) {
  auto it = std::upper_bound(std::begin(kCombiningRanges), std::end(kCombiningRanges), c,
                             [](uint32_t value, const CombiningRange &range) { return value < range.first; });
  return it != std::begin(kCombiningRanges) && c <= std::prev(it)->last ? std::prev(it)->ccc : 0;
}

void decompose(uint32_t c, std::vector<uint32_t> &out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    uint32_t s = c - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  auto it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), c,
                             [](const Decomposition &d, uint32_t value) { return d.code_point < value; });
  if (it == std::end(kDecompositions) || it->code_point != c) {
    out.push_back(c);
    return;
  }
  decompose(it->first, out);
  if (it->second) decompose(it->second, out);
}

// The primary composite of a + b, or 0.
uint32_t compose(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  auto it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b),
                             [](const Composition &c, const std::pair<uint32_t, uint32_t> &key) {
                               return std::make_pair(c.first, c.second) < key;
                             });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

// NFC of a run of valid UTF-8.
void nfc_run(const std::string &text, size_t begin, size_t end, std::string &out) {
  std::vector<uint32_t> chars;
  for (size_t position = begin; position < end;) {
    CodePoint c = decode_utf8(text, position);
    decompose(c.value, chars);
    position += c.length;
  }
  // Canonical ordering: each run of non-starters sorted stably by combining class.
  for (size_t i = 1; i < chars.size(); ++i) {
    uint8_t ccc = combining_class(chars[i]);
    if (ccc == 0) continue;
    for (size_t j = i; j > 0 && combining_class(chars[j - 1]) > ccc; --j) std::swap(chars[j - 1], chars[j]);
  }
  // Canonical composition: a character joins the last starter unless a character between them
  // has a class as high as its own (it is blocked).
  size_t kept = 0, starter = 0;
  bool have_starter = false;
  int last_class = -1;  // class of the last kept character after the starter; -1: none
  for (size_t i = 0; i < chars.size(); ++i) {
    uint32_t c = chars[i];
    int ccc = combining_class(c);
    if (have_starter && (last_class < ccc || last_class == -1)) {
      if (uint32_t composite = compose(chars[starter], c)) {
        chars[starter] = composite;
        continue;
      }
    }
    if (ccc == 0) {
      starter = kept;
      have_starter = true;
      last_class = -1;
    } else {
      last_class = ccc;
    }
    chars[kept++] = c;
  }
  for (size_t i = 0; i < kept; ++i) out += encode_utf8(chars[i]);
}

// NFC of valid UTF-8 (no invalid byte inside). It is cut before each ASCII character, which has
// class 0, has no decomposition and ends no composition: nothing joins across such a cut. A piece
// with nothing from U+0300 on is already NFC (below it nothing combines or decomposes for good).
void nfc_valid(const std::string &text, size_t begin, size_t end, std::string &out) {
  for (size_t piece = begin; piece < end;) {
    size_t position = piece;
    bool simple = true;
    do {
      CodePoint c = decode_utf8(text, position);
      simple = simple && c.value < 0x300;
      position += c.length;
    } while (position < end && uint8_t(text[position]) >= 0x80);
    if (simple) out.append(text, piece, position - piece);
    else nfc_run(text, piece, position, out);
    piece = position;
  }
}

}  // namespace

std::string to_nfc(const std::string &text) {
  std::string out;
  out.reserve(text.size());
  size_t run = 0;
  for (size_t position = 0; position < text.size();) {
    CodePoint c = decode_utf8(text, position);
    if (!c.valid) {
      nfc_valid(text, run, position, out);
      out += text[position];
      run = position + 1;
    }
    position += c.length;
  }
  nfc_valid(text, run, text.size(), out);
  return out;
}

}  // namespace zf
