// commands.hpp: the zfcore subcommands; each returns the process exit code.
#pragma once

#include "runtime/error.hpp"

#include <exception>
#include <string>
#include <vector>

namespace zf {

// A malformed command line (exit code 2).
struct UsageError : Error {
  using Error::Error;
};

int command_version();
int command_run(const std::vector<std::string> &args);
int command_validate(const std::vector<std::string> &args);
int command_plugins(const std::vector<std::string> &args);
int command_bench(const std::vector<std::string> &args);
int command_estimate(const std::vector<std::string> &args);

// The user-facing text of an exception (zf::Error as is, libtorch's without its backtrace).
std::string error_message(const std::exception &error);

}  // namespace zf
