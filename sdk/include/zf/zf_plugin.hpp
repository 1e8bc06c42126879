// zf_plugin.hpp: header-only C++ helpers for writing zfcore plugins on top of zf_plugin.h.
//
// Defines: ZF_PLUGIN_DEFINE (exports both entry points for a descriptor), zf::negotiate (the
// default version handshake), zf::fail (fill a zf_error), zf::guard (turn C++ exceptions into
// status codes so none crosses the ABI), zf::Config (typed getters over the host's config table),
// zf::param_bool/param_int/param_float/param_string (the entries of a zf_param_decl table),
// zf::log and the memory-estimate helpers. Nothing here links against zfcore.
#pragma once

#include <zf/zf_plugin.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace zf {

// The default handshake: the highest minor both speak when the majors agree; our own version
// otherwise, so that the host can tell the user which side is older.
inline uint32_t negotiate(uint32_t host_version, uint32_t own_version = ZF_ABI_VERSION) {
  if (ZF_ABI_MAJOR_OF(host_version) != ZF_ABI_MAJOR_OF(own_version)) return own_version;
  return host_version < own_version ? host_version : own_version;
}

// Writes a printf-style message into error and returns status.
inline zf_status fail(zf_error *error, zf_status status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
inline zf_status fail(zf_error *error, zf_status status, const char *format, ...) {
  if (error) {
    va_list args;
    va_start(args, format);
    std::vsnprintf(error->message, sizeof error->message, format, args);
    va_end(args);
  }
  return status;
}

// Thrown inside a plugin to leave with a specific status; zf::guard converts it.
struct Failure : std::runtime_error {
  zf_status status;
  Failure(zf_status s, const std::string &message) : std::runtime_error(message), status(s) {}
};

// Runs body (returning zf_status or void) and converts any exception into a status + message.
template <class Body>
zf_status guard(zf_error *error, Body &&body) noexcept {
  try {
    if constexpr (std::is_void_v<decltype(body())>) {
      body();
      return ZF_OK;
    } else {
      return body();
    }
  } catch (const Failure &failure) {
    return fail(error, failure.status, "%s", failure.what());
  } catch (const std::bad_alloc &) {
    return fail(error, ZF_ERROR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception &exception) {
    return fail(error, ZF_ERROR, "%s", exception.what());
  } catch (...) {
    return fail(error, ZF_ERROR, "unknown exception");
  }
}

inline void log(const zf_host *host, zf_log_level level, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
inline void log(const zf_host *host, zf_log_level level, const char *format, ...) {
  char buffer[ZF_MESSAGE_CAPACITY];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  host->log(host, level, buffer);
}

// ---- Declared parameters: one call per key, so that a table reads
//   const zf_param_decl params[] = {
//       zf::param_bool("overlap", "true", "update buckets as the backward finishes them"),
//       zf::param_int("queue_depth", "32", "requests in flight", zf::between(1, 4096)),
//       zf::param_float("ratio", "0.1", "fraction of the columns selected", zf::between(0, 1)),
//       zf::param_string("io_backend", "auto", "how files are read", "auto|io_uring|threads"),
//   };
// Defaults are text, as the user would write them (strings unquoted). The range is checked by the
// host before create, with the user's file:line:col.
struct ParamRange {
  uint32_t flags = 0;  // ZF_PARAM_HAS_MIN, ...
  double min = 0, max = 0;
};
constexpr ParamRange at_least(double min) { return {ZF_PARAM_HAS_MIN, min, 0}; }                          // >= min
constexpr ParamRange above(double min) { return {ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE, min, 0}; }  // > min
constexpr ParamRange between(double min, double max) { return {ZF_PARAM_HAS_MIN | ZF_PARAM_HAS_MAX, min, max}; }

constexpr zf_param_decl param_bool(const char *key, const char *default_value, const char *doc) {
  return {key, ZF_PARAM_BOOL, 0, default_value, doc, 0, 0, nullptr, nullptr};
}
constexpr zf_param_decl param_int(const char *key, const char *default_value, const char *doc,
                                  ParamRange range = {}) {
  return {key, ZF_PARAM_INT, range.flags, default_value, doc, range.min, range.max, nullptr, nullptr};
}
constexpr zf_param_decl param_float(const char *key, const char *default_value, const char *doc,
                                    ParamRange range = {}) {
  return {key, ZF_PARAM_FLOAT, range.flags, default_value, doc, range.min, range.max, nullptr, nullptr};
}
// choices: the allowed values separated by '|', or nullptr for any string.
constexpr zf_param_decl param_string(const char *key, const char *default_value, const char *doc,
                                     const char *choices = nullptr) {
  return {key, ZF_PARAM_STRING, 0, default_value, doc, 0, 0, choices, nullptr};
}

// Typed access to the plugin's validated table; throws Failure on undeclared keys. Built from the
// host's services (a plugin object) or from a memory shape (estimate_memory, ABI 1.7).
class Config {
 public:
  Config(const zf_host *host, const zf_config *config) : host_(host), config_(config) {}
  explicit Config(const zf_memory_shape *shape) : shape_(shape), config_(shape->config) {}
  bool boolean(const char *key) const {
    int32_t value = 0;
    check(shape_ ? shape_->config_bool(config_, key, &value) : host_->config_bool(host_, config_, key, &value), key);
    return value != 0;
  }
  int64_t integer(const char *key) const {
    int64_t value = 0;
    check(shape_ ? shape_->config_int(config_, key, &value) : host_->config_int(host_, config_, key, &value), key);
    return value;
  }
  double real(const char *key) const {
    double value = 0;
    check(shape_ ? shape_->config_float(config_, key, &value) : host_->config_float(host_, config_, key, &value),
          key);
    return value;
  }
  std::string string(const char *key) const {
    const char *value = nullptr;
    check(shape_ ? shape_->config_string(config_, key, &value) : host_->config_string(host_, config_, key, &value),
          key);
    return value ? value : "";
  }

 private:
  static void check(zf_status status, const char *key) {
    if (status != ZF_OK)
      throw Failure(status, std::string("config key '") + key + "' is not declared with that type");
  }
  const zf_host *host_ = nullptr;
  const zf_memory_shape *shape_ = nullptr;
  const zf_config *config_;
};

// Copies text into one of zf_memory_estimate's messages (note, advice), cut to fit.
template <size_t N>
inline void set_text(char (&field)[N], const std::string &text) {
  std::snprintf(field, N, "%s", text.c_str());
}

// A memory shape's layout numel (the sum of its blocks) and its largest block.
inline uint64_t shape_numel(const zf_memory_shape &shape) {
  uint64_t numel = 0;
  for (uint32_t b = 0; b < shape.block_count; ++b) numel += shape.blocks[b];
  return numel;
}
inline uint64_t shape_largest_block(const zf_memory_shape &shape) {
  uint64_t largest = 0;
  for (uint32_t b = 0; b < shape.block_count; ++b) largest = shape.blocks[b] > largest ? shape.blocks[b] : largest;
  return largest;
}

// Turns a host call that fills a zf_error into an exception inside plugin code.
inline void check(zf_status status, const zf_error &error) {
  if (status != ZF_OK) throw Failure(status, error.message);
}

// Scalar conversions between float and the 16-bit formats (round to nearest even).
inline float bf16_to_float(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}
inline uint16_t float_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}
inline float f16_to_float(uint16_t value) {
  _Float16 half;
  std::memcpy(&half, &value, 2);
  return float(half);
}
inline uint16_t float_to_f16(float value) {
  _Float16 half = _Float16(value);
  uint16_t out;
  std::memcpy(&out, &half, 2);
  return out;
}
// Element i of a F32, BF16 or F16 view as float.
inline float load_float(const zf_tensor_view &view, uint64_t i) {
  switch (view.dtype) {
    case ZF_DTYPE_BF16: return bf16_to_float(static_cast<const uint16_t *>(view.data)[i]);
    case ZF_DTYPE_F16: return f16_to_float(static_cast<const uint16_t *>(view.data)[i]);
    default: return static_cast<const float *>(view.data)[i];
  }
}

inline size_t dtype_size(zf_dtype dtype) {
  switch (dtype) {
    case ZF_DTYPE_F32: case ZF_DTYPE_I32: return 4;
    case ZF_DTYPE_BF16: case ZF_DTYPE_F16: return 2;
    case ZF_DTYPE_F64: case ZF_DTYPE_I64: return 8;
    case ZF_DTYPE_U8: return 1;
  }
  return 0;
}

}  // namespace zf

// Exports the two entry points for a static zf_descriptor named by `descriptor`.
#define ZF_PLUGIN_DEFINE(descriptor)                                                     \
  extern "C" ZF_EXPORT uint32_t zf_plugin_negotiate(uint32_t host_version) {             \
    return zf::negotiate(host_version);                                                  \
  }                                                                                      \
  extern "C" ZF_EXPORT const zf_descriptor *zf_plugin_describe(void) { return &(descriptor); }
