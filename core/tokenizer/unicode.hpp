// unicode.hpp: the little Unicode the tokenizers need: lenient UTF-8 decoding and the character
// classes \p{L}, \p{N} and \s of the pre-tokenizer patterns. Pure C++ (no ICU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zf {

// One decoded character of a byte string. An invalid UTF-8 byte decodes alone as U+FFFD with
// valid = false, so every byte string scans to the end and byte-level tokenizers round-trip it.
struct CodePoint {
  uint32_t value = 0;
  size_t length = 1;  // bytes it took
  bool valid = true;
};

CodePoint decode_utf8(const std::string &text, size_t position);
std::string encode_utf8(uint32_t code_point);
// `bytes` with each invalid UTF-8 sequence (its maximal subpart) replaced by U+FFFD, as Python's
// bytes.decode("utf-8", errors="replace") and Hugging Face tokenizers' decode do.
std::string valid_utf8(const std::string &bytes);

bool is_letter(uint32_t code_point);      // general category L*
bool is_number(uint32_t code_point);      // general category N*
bool is_whitespace(uint32_t code_point);  // the White_Space property (regex \s)

}  // namespace zf
