// api_copy.hpp: a plugin's api table as this host's struct: what an older minor version lacks
// (its struct_size is smaller) is NULL, so the entries can be tested for NULL alone.
#pragma once

#include <algorithm>
#include <cstring>

namespace zf {

template <class Api>
Api api_copy(const void *table) {
  Api api{};
  const Api *raw = static_cast<const Api *>(table);
  std::memcpy(&api, raw, std::min<size_t>(raw->struct_size, sizeof api));
  api.struct_size = sizeof api;
  return api;
}

}  // namespace zf
