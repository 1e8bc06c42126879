// safetensors.hpp: reads and writes the safetensors format (the Hugging Face weight format, also
// used for zfcore's own checkpoints), single files and sharded sets (model.safetensors.index.json).
//
// The layout of a file is in safetensors_header.hpp, which parses headers without libtorch; files
// written here pad the header with spaces so that the data section starts 8-byte aligned.
//
// Every error is a zf::Error naming the file and, where one is involved, the tensor.
#pragma once

#include "checkpoint/safetensors_header.hpp"

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class PendingFile;  // runtime/files.hpp

// A tensor that is not in memory as a whole (optimizer state on disk, an export's fused experts):
// saved and loaded piece by piece, `piece_numel` elements at a time (the last piece may be shorter).
struct TensorPieces {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Float;
  uint64_t numel = 0, piece_numel = 0;
  std::function<void(uint64_t first, uint64_t count, void *out)> read;        // saving: fill `out`
  std::function<void(uint64_t first, uint64_t count, const void *in)> write;  // loading: take `in`
  std::vector<int64_t> shape;  // as saved; empty: 1-D, [numel]
};

// One safetensors file, memory-mapped read-only; cheap to copy (the mapping is shared).
class SafetensorsFile {
 public:
  // Maps `path` and validates the whole header (offsets, dtypes, sizes) up front.
  static SafetensorsFile open(const std::string &path);

  const std::string &path() const;
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string &name) const;
  const TensorInfo &info(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const;
  // A new contiguous CPU tensor holding the stored values.
  at::Tensor load(const std::string &name) const;
  // Copies the stored values into `destination` (any device, dtype or strides; the shape must
  // match), converting the dtype on the way; avoids an intermediate copy for large weights.
  void read_into(const std::string &name, at::Tensor &destination) const;
  // Hands the stored values of `pieces.name` to pieces.write, piece by piece (dtype and numel must
  // match).
  void read_pieces(const TensorPieces &pieces) const;
  // Whether the writer recorded a checksum of every tensor (write_safetensors does), and the tensors
  // whose bytes no longer match it, each as "tensor 'NAME' ..." (empty: the file is whole).
  bool has_checksums() const;
  std::vector<std::string> damaged_tensors() const;
  // The stored bytes of a tensor (in the read-only mapping: only the pages touched are read), its
  // recorded checksum and block checksums ("" when the writer recorded none).
  std::pair<const unsigned char *, uint64_t> bytes(const std::string &name) const;
  std::string checksum(const std::string &name) const;
  std::string block_checksums(const std::string &name) const;

 private:
  struct Mapping;
  std::shared_ptr<const Mapping> mapping_;
};

// Writes `tensors` (any device, dtype in the supported set, any strides) in the given order, then
// `pieces` (through their read), to `path` through the filesystem rule (runtime/files.hpp: a
// temporary of this process, fsynced, renamed onto `path`, never through a link). Names must be
// unique. The metadata gains "checksum.NAME" for every tensor (its bytes' Checksum, checksum.hpp),
// which SafetensorsFile::damaged_tensors checks, and with block_checksums "checksum_blocks.NAME"
// (BlockChecksums: checkpoints, whose ranges are read by other layouts).
void write_safetensors(const std::string &path, const std::vector<std::pair<std::string, at::Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata = {},
                       const std::vector<TensorPieces> &pieces = {}, bool block_checksums = false);
// The same into a pending file, written and fsynced but not committed: the caller commits it,
// alone or together with the files that belong with it (commit_together).
void write_safetensors(PendingFile &file, const std::vector<std::pair<std::string, at::Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata = {},
                       const std::vector<TensorPieces> &pieces = {}, bool block_checksums = false);

// The weights of a Hugging Face checkpoint directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` ("weight_map": tensor name -> shard file).
class SafetensorsSet {
 public:
  static SafetensorsSet open_directory(const std::string &directory);

  const std::string &directory() const { return directory_; }
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string &name) const { return owner_.count(name) != 0; }
  const TensorInfo &info(const std::string &name) const { return file_of(name).info(name); }
  at::Tensor load(const std::string &name) const { return file_of(name).load(name); }
  void read_into(const std::string &name, at::Tensor &destination) const {
    file_of(name).read_into(name, destination);
  }
  const SafetensorsFile &file_of(const std::string &name) const;  // throws naming the directory

 private:
  std::string directory_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> owner_;  // tensor name -> index into files_
};

// "F32" -> Float etc.; throws for names outside the supported set (safetensors_header.hpp's).
// dtype_name is the inverse.
c10::ScalarType safetensors_dtype(const std::string &name);
std::string safetensors_dtype_name(c10::ScalarType dtype);

}  // namespace zf
