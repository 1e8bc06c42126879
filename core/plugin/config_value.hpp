// config_value.hpp: a plugin's config getters (zf_host's, and zf_memory_shape's) over a PluginConfig.
#pragma once

#include "config/plugin_config.hpp"

#include <zf/zf_plugin.h>

#include <type_traits>

namespace zf {

// Key `key` of `config` (a PluginConfig behind the ABI's opaque zf_config) into *out: bool as
// int32_t, integers, reals, strings (valid as long as the config). An absent key, or one of another
// type, is ZF_ERROR_INVALID_ARGUMENT.
template <class T>
zf_status config_value(const zf_config *config, const char *key, T *out) {
  const auto *table = reinterpret_cast<const PluginConfig *>(config);
  const Value *value = table && key && out ? table->get(key) : nullptr;
  if (!value) return ZF_ERROR_INVALID_ARGUMENT;
  if constexpr (std::is_same_v<T, int32_t>) {
    if (!std::holds_alternative<bool>(*value)) return ZF_ERROR_INVALID_ARGUMENT;
    *out = std::get<bool>(*value) ? 1 : 0;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    if (!std::holds_alternative<int64_t>(*value)) return ZF_ERROR_INVALID_ARGUMENT;
    *out = std::get<int64_t>(*value);
  } else if constexpr (std::is_same_v<T, double>) {
    if (!std::holds_alternative<double>(*value)) return ZF_ERROR_INVALID_ARGUMENT;
    *out = std::get<double>(*value);
  } else {
    if (!std::holds_alternative<std::string>(*value)) return ZF_ERROR_INVALID_ARGUMENT;
    *out = std::get<std::string>(*value).c_str();
  }
  return ZF_OK;
}

}  // namespace zf
