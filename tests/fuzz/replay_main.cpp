// replay_main.cpp: main() of a fuzz target outside libFuzzer (the normal build). Runs the target's
// LLVMFuzzerTestOneInput on every file named on the command line, or in a directory named there,
// in name order: ctest replays each target's corpus this way (tests/fuzz/CMakeLists.txt). An input
// that fails aborts the process (fuzz_target.hpp) right after the line naming it; so does a valid
// input (fixture_*, valid_*, example_*) that is rejected, or a bad one (reliability_*, bad_*) that
// is accepted.
#include "fuzz_target.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

namespace {

bool starts_with_any(const std::string &name, std::initializer_list<const char *> prefixes) {
  for (const char *prefix : prefixes)
    if (name.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  // As libFuzzer's -rss_limit_mb: an input that makes a parser allocate gigabytes fails here
  // (std::bad_alloc, a finding) instead of swapping.
  rlimit memory{4ull << 30, 4ull << 30};
  setrlimit(RLIMIT_AS, &memory);

  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    if (fs::is_directory(argv[i])) {
      for (const auto &entry : fs::directory_iterator(argv[i]))
        if (entry.is_regular_file()) inputs.push_back(entry.path());
    } else if (fs::is_regular_file(argv[i])) {
      inputs.push_back(argv[i]);
    } else {
      std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", argv[i]);
      return 2;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "usage: %s FILE|DIRECTORY...  (no inputs found)\n", argv[0]);
    return 2;
  }
  for (const fs::path &input : inputs) {
    std::ifstream in(input, std::ios::binary);
    std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", input.c_str(), bytes.size());
    static const uint8_t nothing = 0;  // libFuzzer never passes a null pointer, even for no bytes
    LLVMFuzzerTestOneInput(bytes.empty() ? &nothing : bytes.data(), bytes.size());
    const std::string name = input.filename().string(), &rejection = zf::fuzz::rejection;
    if (starts_with_any(name, {"fixture_", "valid_", "example_"}) && !rejection.empty())
      zf::fuzz::fail("a valid input was rejected: " + rejection);
    if (starts_with_any(name, {"reliability_", "bad_"}) && rejection.empty())
      zf::fuzz::fail("a bad input was accepted");
    if (!rejection.empty()) std::fprintf(stderr, "  rejected: %s\n", rejection.c_str());
  }
  std::printf("replay: %zu inputs, none failed\n", inputs.size());
  return 0;
}
