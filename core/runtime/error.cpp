#include "runtime/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <vector>

namespace zf {

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
  return std::string(buffer.data(), length > 0 ? size_t(length) : 0);
}

}  // namespace zf
