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

namespace {
uint64_t block_bytes_for(uint64_t total_bytes) {
  uint64_t block = uint64_t(64) << 10;
  while (total_bytes / block >= 4096) block *= 2;
  return block;
}
uint64_t block_count(uint64_t total_bytes, uint64_t block) { return (total_bytes + block - 1) / block; }
}  // namespace

BlockChecksums::BlockChecksums(uint64_t total_bytes)
    : block_bytes_(block_bytes_for(total_bytes)), total_bytes_(total_bytes) {}

void BlockChecksums::update(const void *data, size_t bytes) {
  const auto *p = static_cast<const unsigned char *>(data);
  while (bytes > 0) {
    const uint64_t in_block = done_ % block_bytes_;
    const size_t take = size_t(std::min<uint64_t>(bytes, block_bytes_ - in_block));
    current_.update(p, take);
    p += take;
    bytes -= take;
    done_ += take;
    if (done_ % block_bytes_ == 0 || done_ == total_bytes_) {
      values_.push_back(current_.value());
      current_ = Checksum();
    }
  }
}

std::string BlockChecksums::text() const {
  std::string out = std::to_string(block_bytes_) + ":";
  const uint64_t blocks = block_count(total_bytes_, block_bytes_);
  char hex[17];
  for (uint64_t b = 0; b < blocks; ++b) {
    std::snprintf(hex, sizeof hex, "%016llx", (unsigned long long)(b < values_.size() ? values_[b] : 0));
    out += hex;
  }
  return out;
}

BlockChecksumList parse_block_checksums(const std::string &text, uint64_t total_bytes) {
  BlockChecksumList list;
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0 || colon > 19) return list;
  if (text.find_first_not_of("0123456789", 0) < colon) return list;
  const uint64_t block = std::stoull(text.substr(0, colon));
  if (block == 0 || text.size() - colon - 1 != 16 * block_count(total_bytes, block)) return list;
  for (size_t at = colon + 1; at < text.size(); at += 16) list.hex.push_back(text.substr(at, 16));
  list.block_bytes = block;
  return list;
}

}  // namespace zf
