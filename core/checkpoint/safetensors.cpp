#include "checkpoint/safetensors.hpp"

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; so must the host be");

namespace zf {
namespace {

// The format's own cap on the header (safetensors rejects larger ones too).
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

const std::vector<std::pair<std::string, c10::ScalarType>> &dtype_table() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> table = {
      {"F32", c10::ScalarType::Float}, {"BF16", c10::ScalarType::BFloat16}, {"F16", c10::ScalarType::Half},
      {"F64", c10::ScalarType::Double}, {"I64", c10::ScalarType::Long},      {"I32", c10::ScalarType::Int},
      {"I16", c10::ScalarType::Short},  {"I8", c10::ScalarType::Char},       {"U8", c10::ScalarType::Byte},
      {"BOOL", c10::ScalarType::Bool}};
  return table;
}

std::string supported_dtypes() {
  std::string names;
  for (const auto &[name, type] : dtype_table()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

std::string errno_text() { return std::strerror(errno); }

}  // namespace

c10::ScalarType safetensors_dtype(const std::string &name) {
  for (const auto &[n, type] : dtype_table())
    if (n == name) return type;
  throw Error(format("dtype \"%s\" is not supported (supported: %s)", excerpt(name).c_str(), supported_dtypes().c_str()));
}

std::string safetensors_dtype_name(c10::ScalarType dtype) {
  for (const auto &[name, type] : dtype_table())
    if (type == dtype) return name;
  throw Error(format("dtype %s cannot be stored in safetensors (supported: %s)", c10::toString(dtype),
                     supported_dtypes().c_str()));
}

// ---- reading -------------------------------------------------------------------------------

struct SafetensorsFile::Mapping {
  std::string path;
  const unsigned char *base = nullptr;  // whole file
  size_t size = 0;
  const unsigned char *data = nullptr;  // data section
  uint64_t data_size = 0;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;

  ~Mapping() {
    if (base && size) munmap(const_cast<unsigned char *>(base), size);
  }
};

namespace {

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
  try {
    info.dtype = safetensors_dtype(info.dtype_name);
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
  uint64_t expected = numel * c10::elementSize(info.dtype);
  ZF_REQUIRE(info.end - info.begin == expected,
             "%s: tensor '%s': shape %s of %s needs %llu bytes but data_offsets [%llu, %llu) hold %llu", file,
             tensor, excerpt(shape.dump()).c_str(), excerpt(info.dtype_name).c_str(), (unsigned long long)expected,
             (unsigned long long)info.begin, (unsigned long long)info.end,
             (unsigned long long)(info.end - info.begin));
  return info;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string &path) {
  auto mapping = std::make_shared<Mapping>();
  mapping->path = path;
  const char *file = path.c_str();
  std::string cannot_open;
  int fd = open_regular_file(path, &cannot_open);
  ZF_REQUIRE(fd >= 0, "%s: cannot open safetensors file: %s", file, cannot_open.c_str());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    throw Error(format("%s: cannot stat: %s", file, why.c_str()));
  }
  mapping->size = size_t(st.st_size);
  if (mapping->size > 0) {
    void *base = mmap(nullptr, mapping->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (base == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      throw Error(format("%s: cannot map %zu bytes: %s", file, mapping->size, why.c_str()));
    }
    mapping->base = static_cast<const unsigned char *>(base);
  }
  ::close(fd);  // the mapping stays valid

  ZF_REQUIRE(mapping->size >= 8,
             "%s: truncated safetensors file: %zu bytes, but the format starts with an 8-byte header length", file,
             mapping->size);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, mapping->base, 8);
  ZF_REQUIRE(header_bytes <= kMaxHeaderBytes && header_bytes <= mapping->size - 8,
             "%s: corrupt safetensors header: the header length %llu runs past the end of the %zu-byte file "
             "(truncated, or not a safetensors file)",
             file, (unsigned long long)header_bytes, mapping->size);
  mapping->data = mapping->base + 8 + header_bytes;
  mapping->data_size = mapping->size - 8 - header_bytes;

  nlohmann::json header = parse_json(
      std::string(reinterpret_cast<const char *>(mapping->base) + 8, header_bytes), path + ": corrupt safetensors header");
  ZF_REQUIRE(header.is_object(), "%s: corrupt safetensors header: expected a JSON object", file);
  for (const auto &[name, entry] : header.items()) {
    if (name == "__metadata__")
      parse_metadata(path, entry, mapping->metadata);
    else
      mapping->tensors[name] = parse_entry(path, name, entry, mapping->data_size);
  }

  // Two tensors may not share bytes: sort by begin and check neighbours (empty tensors excepted).
  std::vector<const TensorInfo *> order;
  for (const auto &[name, info] : mapping->tensors)
    if (info.end > info.begin) order.push_back(&info);
  std::sort(order.begin(), order.end(), [](auto *a, auto *b) { return a->begin < b->begin; });
  for (size_t i = 1; i < order.size(); ++i)
    ZF_REQUIRE(order[i]->begin >= order[i - 1]->end,
               "%s: corrupt safetensors header: tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap", file,
               order[i - 1]->name.c_str(), (unsigned long long)order[i - 1]->begin,
               (unsigned long long)order[i - 1]->end, order[i]->name.c_str(), (unsigned long long)order[i]->begin,
               (unsigned long long)order[i]->end);

  SafetensorsFile result;
  result.mapping_ = std::move(mapping);
  return result;
}

const std::string &SafetensorsFile::path() const { return mapping_->path; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto &[name, info] : mapping_->tensors) names.push_back(name);
  return names;
}

bool SafetensorsFile::has(const std::string &name) const { return mapping_->tensors.count(name) != 0; }

const TensorInfo &SafetensorsFile::info(const std::string &name) const {
  auto it = mapping_->tensors.find(name);
  ZF_REQUIRE(it != mapping_->tensors.end(), "%s: no tensor '%s' in this file", mapping_->path.c_str(),
             name.c_str());
  return it->second;
}

const std::map<std::string, std::string> &SafetensorsFile::metadata() const { return mapping_->metadata; }

at::Tensor SafetensorsFile::load(const std::string &name) const {
  const TensorInfo &i = info(name);
  at::Tensor out = at::empty(i.shape, at::TensorOptions().dtype(i.dtype));
  if (i.end > i.begin) std::memcpy(out.data_ptr(), mapping_->data + i.begin, i.end - i.begin);
  return out;
}

void SafetensorsFile::read_into(const std::string &name, at::Tensor &destination) const {
  const TensorInfo &i = info(name);
  ZF_REQUIRE(destination.sizes().vec() == i.shape, "%s: tensor '%s' has shape %s but the model expects %s",
             mapping_->path.c_str(), name.c_str(), c10::str(c10::IntArrayRef(i.shape)).c_str(),
             c10::str(destination.sizes()).c_str());
  const unsigned char *bytes = mapping_->data + i.begin;
  c10::AutoGradMode no_grad(false);  // destination may be a parameter that requires grad
  // A view straight onto the mapping when the bytes are aligned for the dtype (the usual case).
  if (reinterpret_cast<uintptr_t>(bytes) % c10::elementSize(i.dtype) == 0 && i.end > i.begin) {
    at::Tensor stored = at::from_blob(const_cast<unsigned char *>(bytes), i.shape,
                                      at::TensorOptions().dtype(i.dtype));
    destination.copy_(stored);
  } else {
    destination.copy_(load(name));
  }
}

void SafetensorsFile::read_pieces(const TensorPieces &pieces) const {
  const TensorInfo &i = info(pieces.name);
  const uint64_t element = c10::elementSize(pieces.dtype);
  ZF_REQUIRE(i.dtype == pieces.dtype && i.end - i.begin == pieces.numel * element,
             "%s: tensor '%s' holds %llu bytes of %s; this run expects %llu elements of %s", mapping_->path.c_str(),
             pieces.name.c_str(), (unsigned long long)(i.end - i.begin), i.dtype_name.c_str(),
             (unsigned long long)pieces.numel, c10::toString(pieces.dtype));
  for (uint64_t first = 0; first < pieces.numel; first += pieces.piece_numel) {
    const uint64_t count = std::min(pieces.piece_numel, pieces.numel - first);
    pieces.write(first, count, mapping_->data + i.begin + first * element);
  }
}

// ---- writing -------------------------------------------------------------------------------

void write_safetensors(const std::string &path, const std::vector<std::pair<std::string, at::Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata, const std::vector<TensorPieces> &pieces) {
  const char *file = path.c_str();
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  auto describe = [&](const std::string &name, c10::ScalarType type, const std::vector<int64_t> &shape,
                      uint64_t bytes) {
    ZF_REQUIRE(name != "__metadata__", "%s: a tensor may not be called __metadata__", file);
    ZF_REQUIRE(!header.contains(name), "%s: tensor '%s' is listed twice", file, name.c_str());
    std::string dtype;
    try {
      dtype = safetensors_dtype_name(type);
    } catch (const Error &e) {
      throw Error(format("%s: tensor '%s': %s", file, name.c_str(), e.what()));
    }
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  };
  for (const auto &[name, tensor] : tensors) {
    ZF_REQUIRE(tensor.defined(), "%s: tensor '%s' is undefined", file, name.c_str());
    describe(name, tensor.scalar_type(), tensor.sizes().vec(), uint64_t(tensor.numel()) * tensor.element_size());
  }
  for (const TensorPieces &p : pieces)
    describe(p.name, p.dtype, {int64_t(p.numel)}, p.numel * c10::elementSize(p.dtype));
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  uint64_t header_bytes = text.size();

  int fd = ::open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ZF_REQUIRE(fd >= 0, "%s: cannot create: %s", file, errno_text().c_str());
  auto write_all = [&](const void *data, size_t bytes) {
    const char *p = static_cast<const char *>(data);
    while (bytes > 0) {
      ssize_t n = ::write(fd, p, std::min<size_t>(bytes, size_t(1) << 30));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::string why = errno_text();
        ::close(fd);
        throw Error(format("%s: write failed: %s (disk full?)", file, why.c_str()));
      }
      p += n;
      bytes -= size_t(n);
    }
  };
  write_all(&header_bytes, 8);
  write_all(text.data(), text.size());
  // One contiguous CPU copy at a time (only where needed), so saving a large model does not
  // double its memory.
  for (const auto &[name, tensor] : tensors) {
    if (tensor.numel() == 0) continue;
    at::Tensor data = tensor.detach().to(at::kCPU).contiguous();
    write_all(data.data_ptr(), size_t(data.numel()) * data.element_size());
  }
  for (const TensorPieces &p : pieces) {
    const uint64_t element = c10::elementSize(p.dtype);
    std::vector<char> buffer(std::min(p.numel, p.piece_numel) * element);
    for (uint64_t first = 0; first < p.numel; first += p.piece_numel) {
      const uint64_t count = std::min(p.piece_numel, p.numel - first);
      p.read(first, count, buffer.data());
      write_all(buffer.data(), count * element);
    }
  }
  if (::fsync(fd) != 0) {
    std::string why = errno_text();
    ::close(fd);
    throw Error(format("%s: fsync failed: %s", file, why.c_str()));
  }
  ZF_REQUIRE(::close(fd) == 0, "%s: close failed: %s", file, errno_text().c_str());
}

// ---- sharded sets --------------------------------------------------------------------------

SafetensorsSet SafetensorsSet::open_directory(const std::string &directory) {
  namespace fs = std::filesystem;
  SafetensorsSet set;
  set.directory_ = directory;
  fs::path dir(directory);
  fs::path index = dir / "model.safetensors.index.json", single = dir / "model.safetensors";
  if (fs::exists(index)) {
    std::string text;
    std::string why = read_regular_file(index.string(), kMaxHeaderBytes, &text);
    ZF_REQUIRE(why.empty(), "%s: cannot read: %s", index.c_str(), why.c_str());
    nlohmann::json json = parse_json(text, index.string());
    ZF_REQUIRE(json.is_object() && json.contains("weight_map") && json["weight_map"].is_object(),
               "%s: expected an object with a \"weight_map\" (tensor name -> shard file)", index.c_str());
    std::map<std::string, size_t> shard_index;
    for (const auto &[name, shard] : json["weight_map"].items()) {
      ZF_REQUIRE(shard.is_string(), "%s: weight_map[\"%s\"] is not a file name", index.c_str(),
                 excerpt(name).c_str());
      std::string shard_name = shard.get<std::string>();
      auto it = shard_index.find(shard_name);
      if (it == shard_index.end()) {
        it = shard_index.emplace(shard_name, set.files_.size()).first;
        set.files_.push_back(SafetensorsFile::open((dir / shard_name).string()));
      }
      ZF_REQUIRE(set.files_[it->second].has(name), "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                 index.c_str(), name.c_str(), shard_name.c_str());
      set.owner_[name] = it->second;
    }
  } else if (fs::exists(single)) {
    set.files_.push_back(SafetensorsFile::open(single.string()));
    for (const std::string &name : set.files_[0].names()) set.owner_[name] = 0;
  } else {
    throw Error(format("%s: no model.safetensors or model.safetensors.index.json (only safetensors checkpoints "
                       "are read; convert pytorch_model.bin with transformers' save_pretrained)",
                       directory.c_str()));
  }
  return set;
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> names;
  for (const auto &[name, index] : owner_) names.push_back(name);
  return names;
}

const SafetensorsFile &SafetensorsSet::file_of(const std::string &name) const {
  auto it = owner_.find(name);
  ZF_REQUIRE(it != owner_.end(), "%s: the checkpoint has no tensor '%s'", directory_.c_str(), name.c_str());
  return files_[it->second];
}

}  // namespace zf
