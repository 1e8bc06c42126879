#include "checkpoint/checksum.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace zf {
namespace {

constexpr uint64_t kMultiplier = 0x9fb21c651e98df25ull, kFinal = 0xff51afd7ed558ccdull;

uint64_t rotate(uint64_t x, int bits) { return (x << bits) | (x >> (64 - bits)); }

uint64_t load_word(const unsigned char *p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

void mix_stripe(uint64_t lanes[4], const unsigned char *stripe) {
  for (int lane = 0; lane < 4; ++lane)
    lanes[lane] = rotate(lanes[lane] ^ (load_word(stripe + 8 * lane) * kMultiplier), 29) * kMultiplier;
}

uint64_t avalanche(uint64_t x) {
  x ^= x >> 33;
  x *= kFinal;
  x ^= x >> 33;
  return x;
}

}  // namespace

void Checksum::update(const void *data, size_t bytes) {
  const auto *p = static_cast<const unsigned char *>(data);
  total_bytes_ += bytes;
  if (pending_bytes_ > 0) {
    size_t take = std::min(bytes, sizeof pending_ - pending_bytes_);
    std::memcpy(pending_ + pending_bytes_, p, take);
    pending_bytes_ += take;
    p += take;
    bytes -= take;
    if (pending_bytes_ < sizeof pending_) return;
    mix_stripe(lanes_, pending_);
    pending_bytes_ = 0;
  }
  for (; bytes >= sizeof pending_; p += sizeof pending_, bytes -= sizeof pending_) mix_stripe(lanes_, p);
  std::memcpy(pending_, p, bytes);
  pending_bytes_ = bytes;
}

uint64_t Checksum::value() const {
  uint64_t h = total_bytes_ * kMultiplier;
  for (uint64_t lane : lanes_) h = rotate(h ^ avalanche(lane), 27) * kMultiplier;
  for (size_t i = 0; i < pending_bytes_; ++i) h = rotate(h ^ (pending_[i] * kFinal), 23) * kMultiplier;
  return avalanche(h);
}

std::string Checksum::hex() const {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", (unsigned long long)value());
  return text;
}

std::string checksum_hex(const void *data, size_t bytes) {
  Checksum checksum;
  checksum.update(data, bytes);
  return checksum.hex();
}

}  // namespace zf
