#include "checkpoint/safetensors.hpp"

#include "checkpoint/checksum.hpp"

#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"
#include "runtime/parallel.hpp"

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

namespace zf {
namespace {

const std::vector<std::pair<std::string, c10::ScalarType>> &dtype_table() {
  static const std::vector<std::pair<std::string, c10::ScalarType>> table = {
      {"F32", c10::ScalarType::Float}, {"BF16", c10::ScalarType::BFloat16}, {"F16", c10::ScalarType::Half},
      {"F64", c10::ScalarType::Double}, {"I64", c10::ScalarType::Long},      {"I32", c10::ScalarType::Int},
      {"I16", c10::ScalarType::Short},  {"I8", c10::ScalarType::Char},       {"U8", c10::ScalarType::Byte},
      {"BOOL", c10::ScalarType::Bool}};
  return table;
}

std::string errno_text() { return std::strerror(errno); }

// The metadata key of a tensor's checksum, and of its blocks' (BlockChecksums).
std::string checksum_key(const std::string &tensor) { return "checksum." + tensor; }
std::string block_checksum_key(const std::string &tensor) { return "checksum_blocks." + tensor; }

}  // namespace

c10::ScalarType safetensors_dtype(const std::string &name) {
  for (const auto &[n, type] : dtype_table())
    if (n == name) return type;
  throw Error(format("dtype \"%s\" is not supported (supported: %s)", excerpt(name).c_str(), safetensors_dtype_names().c_str()));
}

std::string safetensors_dtype_name(c10::ScalarType dtype) {
  for (const auto &[name, type] : dtype_table())
    if (type == dtype) return name;
  throw Error(format("dtype %s cannot be stored in safetensors (supported: %s)", c10::toString(dtype),
                     safetensors_dtype_names().c_str()));
}

// ---- reading -------------------------------------------------------------------------------

struct SafetensorsFile::Mapping {
  std::string path;
  const unsigned char *base = nullptr;  // whole file
  size_t size = 0;
  const unsigned char *data = nullptr;  // data section
  SafetensorsHeader header;

  ~Mapping() {
    if (base && size) munmap(const_cast<unsigned char *>(base), size);
  }
};

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

  mapping->header = parse_safetensors_header(mapping->base, mapping->size, path);
  mapping->data = mapping->base + mapping->header.data_begin;

  SafetensorsFile result;
  result.mapping_ = std::move(mapping);
  return result;
}

const std::string &SafetensorsFile::path() const { return mapping_->path; }

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> names;
  for (const auto &[name, info] : mapping_->header.tensors) names.push_back(name);
  return names;
}

bool SafetensorsFile::has(const std::string &name) const { return mapping_->header.tensors.count(name) != 0; }

const TensorInfo &SafetensorsFile::info(const std::string &name) const {
  auto it = mapping_->header.tensors.find(name);
  ZF_REQUIRE(it != mapping_->header.tensors.end(), "%s: no tensor '%s' in this file", mapping_->path.c_str(),
             name.c_str());
  return it->second;
}

const std::map<std::string, std::string> &SafetensorsFile::metadata() const { return mapping_->header.metadata; }

at::Tensor SafetensorsFile::load(const std::string &name) const {
  const TensorInfo &i = info(name);
  at::Tensor out = at::empty(i.shape, at::TensorOptions().dtype(safetensors_dtype(i.dtype_name)));
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
  if (reinterpret_cast<uintptr_t>(bytes) % safetensors_element_size(i.dtype_name) == 0 && i.end > i.begin) {
    at::Tensor stored = at::from_blob(const_cast<unsigned char *>(bytes), i.shape,
                                      at::TensorOptions().dtype(safetensors_dtype(i.dtype_name)));
    destination.copy_(stored);
  } else {
    destination.copy_(load(name));
  }
}

void SafetensorsFile::read_pieces(const TensorPieces &pieces) const {
  const TensorInfo &i = info(pieces.name);
  const uint64_t element = c10::elementSize(pieces.dtype);
  ZF_REQUIRE(safetensors_dtype(i.dtype_name) == pieces.dtype && i.end - i.begin == pieces.numel * element,
             "%s: tensor '%s' holds %llu bytes of %s; this run expects %llu elements of %s", mapping_->path.c_str(),
             pieces.name.c_str(), (unsigned long long)(i.end - i.begin), i.dtype_name.c_str(),
             (unsigned long long)pieces.numel, c10::toString(pieces.dtype));
  for (uint64_t first = 0; first < pieces.numel; first += pieces.piece_numel) {
    const uint64_t count = std::min(pieces.piece_numel, pieces.numel - first);
    pieces.write(first, count, mapping_->data + i.begin + first * element);
  }
}

std::pair<const unsigned char *, uint64_t> SafetensorsFile::bytes(const std::string &name) const {
  const TensorInfo &i = info(name);
  return {mapping_->data + i.begin, i.end - i.begin};
}

std::string SafetensorsFile::block_checksums(const std::string &name) const {
  auto it = mapping_->header.metadata.find(block_checksum_key(name));
  return it == mapping_->header.metadata.end() ? std::string() : it->second;
}

std::string SafetensorsFile::checksum(const std::string &name) const {
  auto it = mapping_->header.metadata.find(checksum_key(name));
  return it == mapping_->header.metadata.end() ? std::string() : it->second;
}

bool SafetensorsFile::has_checksums() const {
  for (const auto &[key, value] : mapping_->header.metadata)
    if (key.rfind(checksum_key(""), 0) == 0) return true;
  return false;
}

// ---- writing -------------------------------------------------------------------------------

void write_safetensors(PendingFile &out, const std::vector<std::pair<std::string, at::Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata, const std::vector<TensorPieces> &pieces,
                       bool block_checksums) {
  const std::string path = out.temporary_path();
  const char *file = path.c_str();
  nlohmann::json header = nlohmann::json::object();
  std::map<std::string, std::string> fields = metadata;  // + the checksums, known once the data is written
  std::vector<Checksum> checksums(tensors.size() + pieces.size());
  std::vector<BlockChecksums> blocks;  // with block_checksums: per tensor, as checksums
  std::map<std::string, TensorInfo> entries;  // the header's, for their own checksum
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
    entries[name] = TensorInfo{name, dtype, shape, offset, offset + bytes};
    fields[checksum_key(name)] = Checksum().hex();  // a placeholder of the same width
    if (block_checksums) {
      blocks.emplace_back(bytes);
      fields[block_checksum_key(name)] = blocks.back().text();
    }
    offset += bytes;
  };
  for (const auto &[name, tensor] : tensors) {
    ZF_REQUIRE(tensor.defined(), "%s: tensor '%s' is undefined", file, name.c_str());
    describe(name, tensor.scalar_type(), tensor.sizes().vec(), uint64_t(tensor.numel()) * tensor.element_size());
  }
  for (const TensorPieces &p : pieces)
    describe(p.name, p.dtype, p.shape.empty() ? std::vector<int64_t>{int64_t(p.numel)} : p.shape,
             p.numel * c10::elementSize(p.dtype));
  fields[kEntriesChecksumKey] = entries_checksum(entries);
  auto header_text = [&] {
    header["__metadata__"] = fields;
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
    return text;
  };
  std::string text = header_text();
  uint64_t header_bytes = text.size();

  auto write_all = [&](const void *data, size_t bytes) { out.write(data, bytes); };
  write_all(&header_bytes, 8);
  write_all(text.data(), text.size());
  // One contiguous CPU copy at a time (only where needed), so saving a large model does not
  // double its memory.
  for (size_t t = 0; t < tensors.size(); ++t) {
    const at::Tensor &tensor = tensors[t].second;
    if (tensor.numel() == 0) continue;
    at::Tensor data = tensor.detach().to(at::kCPU).contiguous();
    checksums[t].update(data.data_ptr(), size_t(data.numel()) * data.element_size());
    if (block_checksums) blocks[t].update(data.data_ptr(), size_t(data.numel()) * data.element_size());
    write_all(data.data_ptr(), size_t(data.numel()) * data.element_size());
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    const TensorPieces &p = pieces[i];
    const uint64_t element = c10::elementSize(p.dtype);
    std::vector<char> buffer(std::min(p.numel, p.piece_numel) * element);
    for (uint64_t first = 0; first < p.numel; first += p.piece_numel) {
      const uint64_t count = std::min(p.piece_numel, p.numel - first);
      p.read(first, count, buffer.data());
      checksums[tensors.size() + i].update(buffer.data(), count * element);
      if (block_checksums) blocks[tensors.size() + i].update(buffer.data(), count * element);
      write_all(buffer.data(), count * element);
    }
  }
  // The header again, with the checksums in place of the placeholders (the same length).
  for (size_t t = 0; t < tensors.size(); ++t) fields[checksum_key(tensors[t].first)] = checksums[t].hex();
  for (size_t i = 0; i < pieces.size(); ++i) fields[checksum_key(pieces[i].name)] = checksums[tensors.size() + i].hex();
  for (size_t i = 0; i < blocks.size(); ++i)
    fields[block_checksum_key(i < tensors.size() ? tensors[i].first : pieces[i - tensors.size()].name)] = blocks[i].text();
  text = header_text();
  ZF_REQUIRE(text.size() == header_bytes, "%s: internal: the header changed size with its checksums", file);
  ZF_REQUIRE(::pwrite(out.fd(), text.data(), text.size(), 8) == ssize_t(text.size()),
             "%s: write failed: %s (disk full?)", file, errno_text().c_str());
  out.finish();
}

void write_safetensors(const std::string &path, const std::vector<std::pair<std::string, at::Tensor>> &tensors,
                       const std::map<std::string, std::string> &metadata, const std::vector<TensorPieces> &pieces,
                       bool block_checksums) {
  const std::filesystem::path where(path);
  const Directory directory = Directory::open(where.has_parent_path() ? where.parent_path().string() : ".", false);
  PendingFile out(directory, where.filename().string());
  write_safetensors(out, tensors, metadata, pieces, block_checksums);
  out.commit();
}

// ---- sharded sets --------------------------------------------------------------------------
// model.safetensors wins over model.safetensors.index.json, as in transformers; each weight_map
// entry must name a file of the directory.


SafetensorsSet SafetensorsSet::open_directory(const std::string &directory) {
  namespace fs = std::filesystem;
  SafetensorsSet set;
  set.directory_ = directory;
  fs::path dir(directory);
  fs::path index = dir / "model.safetensors.index.json", single = dir / "model.safetensors";
  // A link that leads out of the directory is not the model's file (as for the shards below).
  for (const char *name : {"model.safetensors", "model.safetensors.index.json"}) {
    const std::string outside = path_inside_problem(directory, name);
    ZF_REQUIRE(outside.empty(), "%s %s; zfcore reads a model's files only from inside its directory: copy the file "
               "there", (dir / name).c_str(), outside.c_str());
  }
  // As in transformers, a single file wins over an index beside it (an export of a fine-tune into
  // a sharded model's directory writes model.safetensors and leaves the old shards).
  if (fs::exists(single)) {
    set.files_.push_back(SafetensorsFile::open(single.string()));
    for (const std::string &name : set.files_[0].names()) set.owner_[name] = 0;
  } else if (fs::exists(index)) {
    std::string text;
    std::string why = read_regular_file(index.string(), kMaxSafetensorsHeaderBytes, &text);
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
        // A shard is a file of the checkpoint's directory: no absolute path, no '..', no link out.
        const std::string outside = path_inside_problem(directory, shard_name);
        ZF_REQUIRE(outside.empty(), "%s: weight_map[\"%s\"] = \"%s\" %s; the index must name files of the "
                   "checkpoint's directory", index.c_str(), excerpt(name).c_str(), excerpt(shard_name).c_str(),
                   outside.c_str());
        it = shard_index.emplace(shard_name, set.files_.size()).first;
        set.files_.push_back(SafetensorsFile::open((dir / shard_name).string()));
      }
      ZF_REQUIRE(set.files_[it->second].has(name), "%s: weight_map puts tensor '%s' in %s, which does not hold it",
                 index.c_str(), name.c_str(), shard_name.c_str());
      set.owner_[name] = it->second;
    }
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
