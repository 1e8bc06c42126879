// bench_flags.cpp: see bench_flags.hpp.
#include "bench/bench_flags.hpp"

#include "runtime/error.hpp"

#include <cerrno>
#include <cstdlib>

namespace zf::bench {

int64_t parse_int(const std::string &flag, const std::string &text, int64_t min, int64_t max) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < min || value > max) {
    if (max == std::numeric_limits<int64_t>::max())
      throw UsageError(format("%s %s: expected an integer >= %lld", flag.c_str(), text.c_str(), (long long)min));
    throw UsageError(format("%s %s: expected an integer from %lld to %lld", flag.c_str(), text.c_str(),
                            (long long)min, (long long)max));
  }
  return value;
}

double parse_number(const std::string &flag, const std::string &text, double min, double max) {
  char *end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  // !(a && b) also refuses NaN; strtod takes "inf", which the max refuses.
  if (text.empty() || *end != '\0' || !(value > min && value <= max))
    throw UsageError(format("%s %s: expected a number in (%g, %g]", flag.c_str(), text.c_str(), min, max));
  return value;
}

std::string one_of(const std::string &flag, const std::string &text, const std::vector<std::string> &names) {
  std::string list;
  for (const std::string &name : names) {
    if (name == text) return text;
    list += (list.empty() ? "" : ", ") + name;
  }
  throw UsageError(format("%s %s: expected one of %s", flag.c_str(), text.c_str(), list.c_str()));
}

}  // namespace zf::bench
