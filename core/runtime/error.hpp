// error.hpp: the core's exception type and printf-style string formatting.
// Inside the core, errors are exceptions (zf::Error); at the plugin ABI they become status codes.
#pragma once

#include <stdexcept>
#include <string>

namespace zf {

// A user-facing error: the message says what to change. Caught once, in main, and printed.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A malformed command line (exit code 2).
struct UsageError : Error {
  using Error::Error;
};

// The user-facing text of an exception (zf::Error as is, libtorch's without its backtrace);
// runtime/error_message.cpp, with libtorch.
std::string error_message(const std::exception &error);

std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Throws zf::Error with the formatted message when cond is false.
#define ZF_REQUIRE(cond, ...)                                  \
  do {                                                         \
    if (!(cond)) throw ::zf::Error(::zf::format(__VA_ARGS__)); \
  } while (0)

}  // namespace zf
