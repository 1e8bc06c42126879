// hf_config_fields.hpp: config.json field access whose messages name the file and the field.
#pragma once

#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <type_traits>

namespace zf {

template <class T>
T field(const nlohmann::json &config, const char *key, const std::string &source) {
  ZF_REQUIRE(config.contains(key) && !config[key].is_null(), "%s: config.json has no \"%s\"", source.c_str(), key);
  // A count must be written as one: json's conversion would cut 32.5 to 32 without a word.
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    const double value = config[key].is_number_float() ? config[key].get<double>() : 0.0;
    ZF_REQUIRE(value == std::floor(value) && std::fabs(value) < 9e15,
               "%s: config.json field \"%s\" = %s must be a whole number", source.c_str(), key,
               excerpt(config[key].dump()).c_str());
  }
  try {
    return config[key].get<T>();
  } catch (const nlohmann::json::exception &) {
    throw Error(format("%s: config.json field \"%s\" = %s has the wrong type", source.c_str(), key,
                       excerpt(config[key].dump()).c_str()));
  }
}

template <class T>
T field_or(const nlohmann::json &config, const char *key, T fallback, const std::string &source) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  return field<T>(config, key, source);
}

// A key whose only value zfcore computes is `expected` (or absent / null): any other is refused, with why.
inline void require_default(const nlohmann::json &config, const char *key, const nlohmann::json &expected,
                            const std::string &source, const char *why) {
  if (!config.contains(key) || config[key].is_null() || config[key] == expected) return;
  throw Error(format("%s: config.json has \"%s\": %s, which zfcore does not support (%s)", source.c_str(), key,
                     excerpt(config[key].dump()).c_str(), why));
}

}  // namespace zf
