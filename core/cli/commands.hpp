// commands.hpp: the zfcore subcommands; each returns the process exit code.
#pragma once

#include "runtime/error.hpp"

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

// Prints "zfcore: error: message" and ends the process; under MPI every rank ends with it, so no
// peer waits forever in a collective.
int fail_run(const std::string &message);

}  // namespace zf
