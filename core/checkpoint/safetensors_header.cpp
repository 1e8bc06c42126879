#include "checkpoint/safetensors_header.hpp"

#include "checkpoint/checksum.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <utility>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

namespace zf {
namespace {

const std::vector<std::pair<std::string, size_t>> &dtype_sizes() {
  static const std::vector<std::pair<std::string, size_t>> table = {
      {"F32", 4}, {"BF16", 2}, {"F16", 2}, {"F64", 8}, {"I64", 8},
      {"I32", 4}, {"I16", 2},  {"I8", 1},  {"U8", 1},  {"BOOL", 1}};
  return table;
}

void parse_metadata(const std::string &path, const nlohmann::json &value, std::map<std::string, std::string> &out) {
  ZF_REQUIRE(value.is_object(), "%s: corrupt safetensors header: \"__metadata__\" must be an object of strings",
             path.c_str());
  for (const auto &[key, text] : value.items()) {
    ZF_REQUIRE(text.is_string(), "%s: corrupt safetensors header: __metadata__[\"%s\"] is not a string",
               path.c_str(), excerpt(key).c_str());
    out[key] = text.get<std::string>();
  }
}

TensorInfo parse_entry(const std::string &path, const std::string &name, const nlohmann::json &entry,
                       uint64_t data_size) {
  std::string shown = excerpt(name);
  const char *file = path.c_str(), *tensor = shown.c_str();
  ZF_REQUIRE(entry.is_object() && entry.contains("dtype") && entry.contains("shape") &&
                 entry.contains("data_offsets"),
             "%s: corrupt safetensors header: tensor '%s' needs \"dtype\", \"shape\" and \"data_offsets\"", file,
             tensor);
  TensorInfo info;
  info.name = name;
  ZF_REQUIRE(entry["dtype"].is_string(), "%s: tensor '%s': \"dtype\" is not a string", file, tensor);
  info.dtype_name = entry["dtype"].get<std::string>();
  size_t element_size = 0;
  try {
    element_size = safetensors_element_size(info.dtype_name);
  } catch (const Error &e) {
    throw Error(format("%s: tensor '%s': %s", file, tensor, e.what()));
  }
  const auto &shape = entry["shape"];
  ZF_REQUIRE(shape.is_array(), "%s: tensor '%s': \"shape\" is not an array", file, tensor);
  uint64_t numel = 1;
  for (const auto &dim : shape) {
    ZF_REQUIRE(dim.is_number_unsigned() || (dim.is_number_integer() && dim.get<int64_t>() >= 0),
               "%s: tensor '%s': shape %s holds a value that is not a non-negative integer", file, tensor,
               excerpt(shape.dump()).c_str());
    uint64_t d = dim.get<uint64_t>();
    ZF_REQUIRE(d == 0 || numel <= (uint64_t(1) << 62) / d, "%s: tensor '%s': shape %s is too large", file, tensor,
               excerpt(shape.dump()).c_str());
    numel *= d;
    info.shape.push_back(int64_t(d));
  }
  const auto &offsets = entry["data_offsets"];
  ZF_REQUIRE(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                 offsets[1].is_number_unsigned(),
             "%s: tensor '%s': \"data_offsets\" must be two non-negative integers, not %s", file, tensor,
             excerpt(offsets.dump()).c_str());
  info.begin = offsets[0].get<uint64_t>();
  info.end = offsets[1].get<uint64_t>();
  ZF_REQUIRE(info.begin <= info.end, "%s: tensor '%s': data_offsets [%llu, %llu) end before they begin", file,
             tensor, (unsigned long long)info.begin, (unsigned long long)info.end);
  ZF_REQUIRE(info.end <= data_size,
             "%s: tensor '%s': data_offsets [%llu, %llu) run past the %llu-byte data section (truncated file?)",
             file, tensor, (unsigned long long)info.begin, (unsigned long long)info.end,
             (unsigned long long)data_size);
  uint64_t expected = 0;
  ZF_REQUIRE(!__builtin_mul_overflow(numel, uint64_t(element_size), &expected),
             "%s: tensor '%s': shape %s of %s is %llu elements, more than 2^64 bytes, but data_offsets [%llu, %llu) "
             "hold %llu bytes", file, tensor, excerpt(shape.dump()).c_str(), excerpt(info.dtype_name).c_str(),
             (unsigned long long)numel, (unsigned long long)info.begin, (unsigned long long)info.end,
             (unsigned long long)(info.end - info.begin));
  ZF_REQUIRE(info.end - info.begin == expected,
             "%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu) hold %llu", file,
             tensor, excerpt(shape.dump()).c_str(), excerpt(info.dtype_name).c_str(), (unsigned long long)expected,
             (unsigned long long)info.begin, (unsigned long long)info.end,
             (unsigned long long)(info.end - info.begin));
  return info;
}

}  // namespace

size_t safetensors_element_size(const std::string &dtype_name) {
  for (const auto &[name, size] : dtype_sizes())
    if (name == dtype_name) return size;
  throw Error(format("dtype \"%s\" is not supported (supported: %s)", excerpt(dtype_name).c_str(),
                     safetensors_dtype_names().c_str()));
}

std::string safetensors_dtype_names() {
  std::string names;
  for (const auto &[name, size] : dtype_sizes()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

SafetensorsHeader parse_safetensors_header(const unsigned char *bytes, size_t size, const std::string &path) {
  const char *file = path.c_str();
  ZF_REQUIRE(size >= 8, "%s: truncated safetensors file: %zu bytes, but the format starts with an 8-byte header length",
             file, size);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, bytes, 8);
  // A length past any header is not shown: those 8 bytes are most likely not a safetensors file's
  // (a text file, a link to another file), and an error does not echo a file's content.
  ZF_REQUIRE(header_bytes <= kMaxSafetensorsHeaderBytes,
             "%s: not a safetensors file: its first 8 bytes do not give a header length of at most %llu bytes",
             file, (unsigned long long)kMaxSafetensorsHeaderBytes);
  ZF_REQUIRE(header_bytes <= size - 8,
             "%s: corrupt safetensors header: the header length %llu runs past the end of the %zu-byte file "
             "(truncated, or not a safetensors file)",
             file, (unsigned long long)header_bytes, size);
  SafetensorsHeader header;
  header.data_begin = 8 + header_bytes;
  header.data_size = size - 8 - header_bytes;

  nlohmann::json json = parse_json(std::string(reinterpret_cast<const char *>(bytes) + 8, header_bytes),
                                   path + ": corrupt safetensors header");
  ZF_REQUIRE(json.is_object(), "%s: corrupt safetensors header: expected a JSON object", file);
  for (const auto &[name, entry] : json.items()) {
    if (name == "__metadata__")
      parse_metadata(path, entry, header.metadata);
    else
      header.tensors[name] = parse_entry(path, name, entry, header.data_size);
  }

  // Two tensors may not share bytes: sort by begin and check neighbours (empty tensors excepted).
  std::vector<const TensorInfo *> order;
  for (const auto &[name, info] : header.tensors)
    if (info.end > info.begin) order.push_back(&info);
  std::sort(order.begin(), order.end(), [](auto *a, auto *b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    ZF_REQUIRE(order[i]->begin >= order[i - 1]->end,
               "%s: corrupt safetensors header: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", file,
               order[i - 1]->name.c_str(), (unsigned long long)order[i - 1]->begin,
               (unsigned long long)order[i - 1]->end, order[i]->name.c_str(), (unsigned long long)order[i]->begin,
               (unsigned long long)order[i]->end);
  if (auto recorded = header.metadata.find(kEntriesChecksumKey); recorded != header.metadata.end()) {
    const std::string actual = entries_checksum(header.tensors);
    ZF_REQUIRE(recorded->second == actual,
               "%s: the tensors' entries in the header (dtype, shape, data offsets) do not match the checksum written "
               "with them (written %s, read %s): the file was edited or damaged after it was written", file,
               excerpt(recorded->second).c_str(), actual.c_str());
  }
  return header;
}

std::string entries_checksum(const std::map<std::string, TensorInfo> &tensors) {
  Checksum checksum;
  for (const auto &[name, info] : tensors) {
    std::string line = name + " " + info.dtype_name + " [";
    for (size_t i = 0; i < info.shape.size(); ++i) line += (i ? "," : "") + std::to_string(info.shape[i]);
    line += "] " + std::to_string(info.begin) + " " + std::to_string(info.end) + "\n";
    checksum.update(line.data(), line.size());
  }
  return checksum.hex();
}

}  // namespace zf
