// safetensors_verify.cpp: SafetensorsFile::damaged_tensors, every tensor of a file against the
// checksums written with it (before a resume, by `zfcore checkpoint verify`).
#include "checkpoint/safetensors.hpp"

#include "checkpoint/checksum.hpp"
#include "checkpoint/read_ahead.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/parallel.hpp"

#include <algorithm>
#include <cstdint>

namespace zf {

// A tensor with block checksums is checked block by block, pieces of about 16 MiB spread over the
// bulk cores (its whole-tensor checksum is one serial pass: a rank's few large tensors read at one
// core's speed); any other tensor whole.
std::vector<std::string> SafetensorsFile::damaged_tensors() const {
  if (!has_checksums()) return {};
  struct Piece {
    size_t tensor;
    uint64_t first_block = 0, blocks = 0;  // none: the whole tensor against its checksum
  };
  std::vector<std::pair<std::string, std::pair<const unsigned char *, uint64_t>>> tensors;  // name, its bytes
  std::vector<BlockChecksumList> lists;
  std::vector<Piece> pieces;
  for (const std::string &name : names()) {
    tensors.emplace_back(name, bytes(name));
    read_ahead(tensors.back().second.first, tensors.back().second.second);
    lists.push_back(parse_block_checksums(block_checksums(name), tensors.back().second.second));
    const uint64_t block = lists.back().block_bytes, count = lists.back().hex.size();
    if (block == 0 || checksum(name).empty()) {
      pieces.push_back({tensors.size() - 1});
      continue;
    }
    const uint64_t per_piece = std::max<uint64_t>(1, (uint64_t(16) << 20) / block);
    for (uint64_t first = 0; first < count; first += per_piece)
      pieces.push_back({tensors.size() - 1, first, std::min(per_piece, count - first)});
  }
  std::vector<std::string> found(pieces.size());  // per piece: what is wrong, or ""
  parallel_chunks(int64_t(pieces.size()), [&](int64_t index) {
    const Piece &piece = pieces[size_t(index)];
    const auto &[name, stored] = tensors[piece.tensor];
    const auto [data, size] = stored;
    const std::string recorded = checksum(name);
    if (recorded.empty()) {
      found[size_t(index)] = format("tensor '%s' has no checksum", name.c_str());
      return;
    }
    if (piece.blocks == 0) {
      std::string actual = checksum_hex(data, size);
      if (actual != recorded)
        found[size_t(index)] = format("tensor '%s' does not match its checksum (written %s, read %s)", name.c_str(),
                                      excerpt(recorded).c_str(), actual.c_str());
      return;
    }
    const BlockChecksumList &list = lists[piece.tensor];
    for (uint64_t b = piece.first_block; b < piece.first_block + piece.blocks; ++b) {
      const uint64_t lo = b * list.block_bytes, hi = std::min(size, lo + list.block_bytes);
      std::string actual = checksum_hex(data + lo, hi - lo);
      if (actual == list.hex[b]) continue;
      found[size_t(index)] = format("tensor '%s' does not match its checksum (bytes [%llu, %llu): written %s, read %s)",
                                    name.c_str(), (unsigned long long)lo, (unsigned long long)hi, list.hex[b].c_str(),
                                    actual.c_str());
      return;
    }
  });
  std::vector<std::string> damaged;
  size_t last_tensor = SIZE_MAX;
  for (size_t p = 0; p < pieces.size(); ++p)
    if (!found[p].empty() && pieces[p].tensor != last_tensor) {  // one finding per tensor
      damaged.push_back(std::move(found[p]));
      last_tensor = pieces[p].tensor;
    }
  return damaged;
}

}  // namespace zf
