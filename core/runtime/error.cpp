#include "runtime/error.hpp"

#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <vector>

namespace zf {

namespace {
// printf writes a NaN whose sign bit is set as "-nan" ("-NAN" for %F, %E, %G), and which NaN an
// operation makes is chance (the CPU, the kernel, the order of a reduction): to the user a NaN is a
// NaN. A "-nan" that stands as a word of its own (not inside a name like "x-nan.toml") loses its sign.
bool part_of_name(char c) { return std::isalnum((unsigned char)c) || c == '.' || c == '_' || c == '/' || c == '-'; }

void unsign_nans(std::string &text) {
  for (size_t at = 0; (at = text.find('-', at)) != std::string::npos; ++at) {
    const bool nan = text.compare(at + 1, 3, "nan") == 0 || text.compare(at + 1, 3, "NAN") == 0;
    if (nan && (at == 0 || !part_of_name(text[at - 1])) && (at + 4 == text.size() || !part_of_name(text[at + 4])))
      text.erase(at, 1);
  }
}
}  // namespace

std::string format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int length = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::vector<char> buffer(length > 0 ? size_t(length) + 1 : 1);
  std::vsnprintf(buffer.data(), buffer.size(), fmt, args);
  va_end(args);
  std::string text(buffer.data(), length > 0 ? size_t(length) : 0);
  unsign_nans(text);
  return text;
}

}  // namespace zf
