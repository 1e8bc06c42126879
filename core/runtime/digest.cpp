#include "runtime/digest.hpp"

namespace zf {

uint64_t digest_bytes(const void *data, size_t bytes, uint64_t state) {
  const auto *p = static_cast<const unsigned char *>(data);
  for (size_t i = 0; i < bytes; ++i) {
    state ^= p[i];
    state *= 1099511628211ull;
  }
  return state;
}

}  // namespace zf
