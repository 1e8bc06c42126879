// Fuzz target: a DeepSpeed config, as `zfcore run ds_config.json` reads it: converted to TOML
// (deepspeed_to_toml, as `zfcore convert` writes it), which is then read as a run config.
#include "config_checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zf::fuzz::fuzz_config_file(data, size, "fuzz.json");
  return 0;
}
