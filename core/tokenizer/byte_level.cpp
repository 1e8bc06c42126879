#include "tokenizer/byte_level.hpp"

#include "tokenizer/unicode.hpp"

#include <array>

namespace zf {
namespace {

struct ByteLevelTable {
  std::array<uint32_t, 256> code_point{};
  std::array<std::string, 256> spelling;
  std::array<int, 256 + 68> byte_of;  // code point -> byte, -1 where none
  ByteLevelTable() {
    byte_of.fill(-1);
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      code_point[b] = printable(b) ? uint32_t(b) : next++;
      spelling[b] = encode_utf8(code_point[b]);
      byte_of[code_point[b]] = b;
    }
  }
};

const ByteLevelTable &table() {
  static const ByteLevelTable instance;
  return instance;
}

}  // namespace

const std::string &byte_level_char(uint8_t b) { return table().spelling[b]; }

std::string to_byte_level(const std::string &bytes, size_t begin, size_t end) {
  std::string out;
  out.reserve(2 * (end - begin));
  for (size_t i = begin; i < end; ++i) out += table().spelling[uint8_t(bytes[i])];
  return out;
}

int byte_level_byte(uint32_t code_point) {
  return code_point < table().byte_of.size() ? table().byte_of[code_point] : -1;
}

}  // namespace zf
