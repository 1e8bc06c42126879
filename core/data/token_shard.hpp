// token_shard.hpp: zfcore's token shard files (.bin), read through mmap. Layout, little-endian,
// a 64-byte header followed by the ids:
//   offset  0  char[8]  magic "ZFTOKENS"
//           8  uint32   format version, 1 or 2
//          12  uint32   bytes per id: 2 (uint16) or 4 (uint32)
//          16  uint64   number of ids
//          24  uint64   vocabulary size the ids are below (0: not recorded)
//          32  uint64   version 2: number of documents (0: none recorded); version 1: zero
//          40  uint32   version 2: flags, bit 0 set when a loss mask follows the ids; version 1: zero
//          44  ...      zero up to byte 64
//          64  ids      count * bytes-per-id bytes; version 1 ends there
//   version 2 then:
//              mask     count bytes (flag bit 0): 1 where the loss counts predicting that token, else 0
//              starts   documents * uint64: where each document starts, the first 0, increasing, below
//                       count (a document runs to the next start, the last one to the end)
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
// Version 2, with a loss mask (empty: none) and document starts (empty: none).
void write_token_shard(const std::string &path, const std::vector<int64_t> &ids, int64_t vocab,
                       const std::vector<uint8_t> &mask, const std::vector<int64_t> &starts);

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
  int version() const { return version_; }
  bool has_mask() const { return mask_ != nullptr; }
  // Whether the loss counts predicting id i (true without a mask).
  bool counted(int64_t i) const { return !mask_ || mask_[i] != 0; }
  int64_t documents() const { return documents_; }
  int64_t document_start(int64_t d) const;  // d < documents()
  // Throws a located error when the file has become shorter than when it was mapped (truncated while
  // training: reading the lost pages would end the process with SIGBUS), or was written since (its
  // ids would change under the run).
  void check_unchanged() const;

 private:
  std::string path_;
  int fd_ = -1;  // kept open to check the size before reads
  void *map_ = nullptr;
  size_t map_bytes_ = 0;
  const unsigned char *ids_ = nullptr, *mask_ = nullptr, *starts_ = nullptr;
  int64_t count_ = 0, vocab_ = 0, documents_ = 0;
  int64_t modified_ns_ = 0;  // the file's modification time when it was mapped
  int width_ = 0, version_ = 0;
};

// The shard files `pattern` names: one file, every *.bin file of a directory, or a glob; sorted
// by name. Throws zf::Error when nothing matches.
std::vector<std::string> find_token_shards(const std::string &pattern);

}  // namespace zf
