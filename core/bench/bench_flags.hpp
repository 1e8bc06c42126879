// bench_flags.hpp: the value checks the `zfcore bench ...` commands share. A bad value is a
// UsageError (exit code 2) whose message names the flag and what it takes.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace zf::bench {

// An integer in [min, max]: "--num-steps zero: expected an integer >= 1".
int64_t parse_int(const std::string &flag, const std::string &text, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max());

// A number in (min, max]: "--topk-ratios 2: expected a number in (0, 1]".
double parse_number(const std::string &flag, const std::string &text, double min, double max);

// text itself when it is one of names: "--stages 7: expected one of 0, 1, 2, 3".
std::string one_of(const std::string &flag, const std::string &text, const std::vector<std::string> &names);

}  // namespace zf::bench
