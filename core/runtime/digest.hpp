// digest.hpp: FNV-1a over bytes, for fingerprints that must not depend on the machine.
#pragma once

#include <cstddef>
#include <cstdint>

namespace zf {

// Continues from state (start with kDigestSeed).
constexpr uint64_t kDigestSeed = 1469598103934665603ull;
uint64_t digest_bytes(const void *data, size_t bytes, uint64_t state);

}  // namespace zf
