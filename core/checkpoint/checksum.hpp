// checksum.hpp: a 64-bit checksum of a byte stream, for the tensors of the safetensors files zfcore
// writes (a checkpoint proves on resume that it holds the bytes that were saved). Four independent
// multiply-rotate lanes over 32-byte stripes keep it at memory speed; it detects damage, it is not
// a cryptographic hash. The value depends only on the bytes, not on how they were split into
// update() calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zf {

class Checksum {
 public:
  void update(const void *data, size_t bytes);
  uint64_t value() const;  // of the bytes so far
  std::string hex() const;  // value() as 16 lower-case hex digits

 private:
  uint64_t lanes_[4] = {0x9e3779b97f4a7c15ull, 0xc2b2ae3d27d4eb4full, 0x165667b19e3779f9ull, 0x85ebca77c2b2ae63ull};
  unsigned char pending_[32] = {};
  size_t pending_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

// The checksum of one buffer.
std::string checksum_hex(const void *data, size_t bytes);

}  // namespace zf
