// byte_level.hpp: GPT-2's byte-to-unicode table. Byte-level BPE vocabularies spell every byte as
// one printable character, so tokens are plain strings: printable Latin-1 bytes stand for
// themselves, the others (controls, space, 0x7F-0xA0, 0xAD) map in order to U+0100, U+0101, ...
// (space becomes 'Ġ', newline 'Ċ').
#pragma once

#include <cstdint>
#include <string>

namespace zf {

// The UTF-8 spelling of byte b's character.
const std::string &byte_level_char(uint8_t b);
// Bytes -> their byte-level spelling.
std::string to_byte_level(const std::string &bytes, size_t begin, size_t end);
// The byte a character stands for, or -1 if it is not in the table.
int byte_level_byte(uint32_t code_point);

}  // namespace zf
