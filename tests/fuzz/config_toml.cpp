// Fuzz target: a run config in TOML, as `zfcore run FILE.toml` reads it.
#include "config_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zf::fuzz::fuzz_config_file(data, size, "fuzz.toml");
  return 0;
}
