// checkpoint_files.hpp: the checkpoint tests' ways of spoiling a saved rank file: bytes flipped
// under its checksums (a failing disk), a tensor rewritten with checksums of what was written (a
// faulty writer), or its header edited by hand.
#pragma once

#include "checkpoint/safetensors.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace zf::test {

// Flips 64 bytes in the middle of tensor `name` of a safetensors file.
inline void flip_tensor_bytes(const std::string &file, const std::string &name) {
  const TensorInfo info = SafetensorsFile::open(file).info(name);
  uint64_t header = 0;
  std::fstream io(file, std::ios::binary | std::ios::in | std::ios::out);
  io.read(reinterpret_cast<char *>(&header), 8);
  const std::streamoff at = std::streamoff(8 + header + (info.begin + info.end) / 2 - 32);
  char bytes[64];
  io.seekg(at);
  io.read(bytes, sizeof bytes);
  for (char &byte : bytes) byte = char(~byte);
  io.seekp(at);
  io.write(bytes, sizeof bytes);
}

// Writes the file again with tensor `name` changed by `change`, and the same metadata.
inline void rewrite_tensor(const std::string &file, const std::string &name,
                           const std::function<void(at::Tensor &)> &change) {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  std::map<std::string, std::string> metadata;
  {
    SafetensorsFile stored = SafetensorsFile::open(file);
    metadata = stored.metadata();
    for (const std::string &tensor : stored.names()) tensors.emplace_back(tensor, stored.load(tensor));
  }
  for (auto &[tensor_name, tensor] : tensors)
    if (tensor_name == name) change(tensor);
  bool blocks = false;  // a checkpoint's block checksums are written again too
  for (const auto &[key, value] : metadata) blocks = blocks || key.rfind("checksum_blocks.", 0) == 0;
  write_safetensors(file, tensors, metadata, {}, blocks);
}

// Rewrites the header of a safetensors file as `edit` changes its JSON (the data section as it was).
inline void edit_header(const std::string &file, const std::function<void(nlohmann::json &)> &edit) {
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, length));
  edit(header);
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t new_length = text.size();
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char *>(&new_length), 8);
  out.write(text.data(), std::streamsize(text.size()));
  out.write(bytes.data() + 8 + length, std::streamsize(bytes.size() - 8 - length));
}

}  // namespace zf::test
