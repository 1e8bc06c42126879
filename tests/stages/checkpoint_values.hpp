// checkpoint_values.hpp: a checkpoint's per-element tensors put together from its rank files, for
// the resharding tests' oracle (independent of CheckpointShards).
#pragma once

#include "checkpoint/safetensors.hpp"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace zf::test {

// The values of per-element tensor `name` over the flat parameters, put together from each rank
// file's shard bounds (independently of CheckpointShards), up to the end of the last shard.
inline std::vector<char> gathered(const std::string &checkpoint, const std::string &name) {
  std::vector<char> out;
  for (int rank = 0;; ++rank) {
    char file[64];
    std::snprintf(file, sizeof file, "/rank-%05d.safetensors", rank);
    if (!std::filesystem::exists(checkpoint + file)) break;
    SafetensorsFile stored = SafetensorsFile::open(checkpoint + file);
    const uint64_t begin = std::stoull(stored.metadata().at("shard_begin"));
    const at::Tensor values = stored.load(name);
    const size_t bytes = size_t(values.numel()) * values.element_size(), at = begin * values.element_size();
    if (out.size() < at + bytes) out.resize(at + bytes, 0);
    std::memcpy(out.data() + at, values.data_ptr(), bytes);
  }
  return out;
}

// Both equal on the shorter one's length, the rest of the longer zero (padding of its layout).
inline bool same_values(std::vector<char> a, std::vector<char> b) {
  if (a.size() > b.size()) std::swap(a, b);
  for (size_t i = a.size(); i < b.size(); ++i)
    if (b[i] != 0) return false;
  return !a.empty() && std::memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace zf::test
