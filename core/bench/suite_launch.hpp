// suite_launch.hpp: how the suite starts one configuration: its command line (`zfcore run`, under
// mpirun for several ranks, each rank under numactl/taskset when it binds at launch) and the child
// process that runs it, with its output in a log, a timeout and its peak RSS.
#pragma once

#include "bench/suite.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace zf::bench {

// The whole file, "" when it cannot be read.
std::string read_file(const std::string &path);

std::vector<std::string> row_command(const SuiteOptions &o, const SuiteRow &row, const std::string &base,
                                     const std::vector<std::string> &overrides);

struct Exit {
  int code = -1, signal = 0;
  bool timed_out = false;
  uint64_t max_rss = 0;
  double wall_s = 0;  // from start to exit
};

// Runs argv with stdout and stderr in log_path; SIGTERM after timeout_s, SIGKILL 10 s later.
Exit spawn(const std::vector<std::string> &argv, const std::string &log_path, double timeout_s);

}  // namespace zf::bench
