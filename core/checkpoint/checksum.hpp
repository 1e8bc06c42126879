// checksum.hpp: a 64-bit checksum of a byte stream, for the tensors of the safetensors files zfcore
// writes (a checkpoint proves on resume that it holds the bytes that were saved). Four independent
// multiply-rotate lanes over 32-byte stripes keep it at memory speed; it detects damage, it is not
// a cryptographic hash. The value depends only on the bytes, not on how they were split into
// update() calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

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

// Checksums of the consecutive blocks of one tensor's bytes, so that a reader of part of a tensor
// (a rank loading its shard of a checkpoint written by another number of ranks) checks only the
// blocks it reads. Blocks are 64 KiB, doubled until a tensor has at most 4096 of them (a header of
// a few tens of kB per tensor). Stored as text "BLOCK_BYTES:" followed by 16 hex digits per block.
class BlockChecksums {
 public:
  explicit BlockChecksums(uint64_t total_bytes);
  void update(const void *data, size_t bytes);
  std::string text() const;  // the same length before, during and after the updates

 private:
  uint64_t block_bytes_, total_bytes_, done_ = 0;
  Checksum current_;
  std::vector<uint64_t> values_;
};

// A parsed BlockChecksums text; block_bytes = 0 when `text` is not one for `total_bytes`.
struct BlockChecksumList {
  uint64_t block_bytes = 0;
  std::vector<std::string> hex;  // one per block
};
BlockChecksumList parse_block_checksums(const std::string &text, uint64_t total_bytes);

}  // namespace zf
