// bench.hpp: the `zfcore bench ...` entry points (the CLI dispatches to them).
#pragma once

#include <string>
#include <vector>

namespace zf {

// `zfcore bench optimizer [options]`: CPU optimizer plugins against torch's CPU AdamW and the
// memory bandwidth of this machine, measured side by side (bench_optimizer.cpp, --help).
int bench_optimizer(const std::vector<std::string> &args);

// `zfcore bench disk PATH [options]`: sequential O_DIRECT write and read bandwidth of the filesystem
// under the directory PATH, the ceiling of an NVMe offload tier there (disk_bandwidth.cpp, --help).
int bench_disk(const std::vector<std::string> &args);

// `zfcore bench stages | offload | zenflow | binding [options]`: configurations trained side by side,
// each in its own process, and a recommendation (suite.hpp, docs/bench.md).
int bench_suite(const std::string &suite, const std::vector<std::string> &args);

}  // namespace zf
