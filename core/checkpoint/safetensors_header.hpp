// safetensors_header.hpp: the header of a safetensors file, parsed and checked without libtorch.
// SafetensorsFile (safetensors.hpp) maps a file and hands its bytes here; the fuzz targets
// (tests/fuzz) hand bytes from memory.
//
// Layout of a file: 8-byte little-endian header length N, N bytes of JSON header, then the data
// section. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end)}
// (offsets relative to the data section) and may hold "__metadata__", a string-to-string map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace zf {

// The format's own cap on the header (safetensors rejects larger ones too).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct TensorInfo {
  std::string name;
  std::string dtype_name;       // as written in the header: "F32", "BF16", ...
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
};

struct SafetensorsHeader {
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t data_begin = 0;                      // where the data section starts in the file
  uint64_t data_size = 0;                       // its length in bytes
};

// Bytes per element of a dtype name ("F32" -> 4); throws zf::Error for names outside the
// supported set (F32, BF16, F16, F64, I64, I32, I16, I8, U8, BOOL).
size_t safetensors_element_size(const std::string &dtype_name);
// The supported dtype names, "F32, BF16, ...", for messages.
std::string safetensors_dtype_names();

// The metadata key under which write_safetensors records entries_checksum() of the header's tensor
// entries: a dtype or shape edited by hand (the same bytes read as another type) is then found,
// which the tensors' own checksums (of their bytes) cannot see.
constexpr const char *kEntriesChecksumKey = "checksum_entries";
// The Checksum (checksum.hpp) of every tensor's name, dtype, shape and data offsets, in name order.
std::string entries_checksum(const std::map<std::string, TensorInfo> &tensors);

// Parses and checks the header of a whole file of `size` bytes at `file`: the header length, the
// JSON, each tensor's dtype, shape and data_offsets (inside the data section, as many bytes as
// shape and dtype need, no two tensors sharing bytes), __metadata__, and the entries against their
// checksum where the writer recorded one (kEntriesChecksumKey). Throws zf::Error naming
// `path` and, where one is involved, the tensor.
SafetensorsHeader parse_safetensors_header(const unsigned char *file, size_t size, const std::string &path);

}  // namespace zf
