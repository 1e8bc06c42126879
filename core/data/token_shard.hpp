// token_shard.hpp: zfcore's token shard files (.bin), read through mmap. Layout, little-endian,
// a 64-byte header followed by the ids:
//   offset  0  char[8]  magic "ZFTOKENS"
//           8  uint32   format version, 1
//          12  uint32   bytes per id: 2 (uint16) or 4 (uint32)
//          16  uint64   number of ids
//          24  uint64   vocabulary size the ids are below (0: not recorded)
//          32  ...      zero up to byte 64
//          64  ids      count * bytes-per-id bytes; the file ends there
// docs/data.md shows how to write one without zfcore (a few lines of Python).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zf {

constexpr size_t kTokenShardHeaderBytes = 64;

// Writes ids as a shard: uint16 when every id (and vocab) fits, else uint32. Throws zf::Error for
// ids outside [0, 2^32) or not below a non-zero vocab.
void write_token_shard(const std::string &path, const std::vector<int64_t> &ids, int64_t vocab = 0);

// One shard mapped read-only. Opening checks the header and the file size and names the file in
// every error.
class TokenShard {
 public:
  explicit TokenShard(const std::string &path);
  ~TokenShard();
  TokenShard(const TokenShard &) = delete;
  TokenShard &operator=(const TokenShard &) = delete;

  const std::string &path() const { return path_; }
  int64_t size() const { return count_; }
  int64_t vocab() const { return vocab_; }
  int bytes_per_id() const { return width_; }
  int64_t operator[](int64_t i) const;
  // Throws a located error when the file has become shorter than when it was mapped (truncated while
  // training: reading the lost pages would end the process with SIGBUS), or was written since (its
  // ids would change under the run).
  void check_unchanged() const;

 private:
  std::string path_;
  int fd_ = -1;  // kept open to check the size before reads
  void *map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char *ids_ = nullptr;
  int64_t count_ = 0, vocab_ = 0;
  int64_t modified_ns_ = 0;  // the file's modification time when it was mapped
  int width_ = 0;
};

// The shard files `pattern` names: one file, every *.bin file of a directory, or a glob; sorted
// by name. Throws zf::Error when nothing matches.
std::vector<std::string> find_token_shards(const std::string &pattern);

}  // namespace zf
