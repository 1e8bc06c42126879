// zfcore convert ds_config.json: prints the DeepSpeed config as zfcore TOML (config/deepspeed.hpp).
#include "cli/commands.hpp"
#include "config/config.hpp"
#include "config/deepspeed.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <cstdio>

namespace zf {

int command_convert(const std::vector<std::string> &args) {
  if (args.size() != 1) throw UsageError("convert takes one file: zfcore convert ds_config.json > train.toml");
  std::string text;
  std::string why = read_regular_file(args[0], 16 << 20, &text);
  ZF_REQUIRE(why.empty(), "%s: cannot read: %s", args[0].c_str(), why.c_str());
  const std::string toml = deepspeed_to_toml(text, args[0]);
  // What `zfcore run` would refuse in this TOML (micro_batch = -4, ...) is refused here, before a
  // config that cannot run is written, with the same check and location.
  RunConfig::parse(toml, args[0] + " (as `zfcore convert " + args[0] + "` writes it)");
  std::fputs(toml.c_str(), stdout);
  return 0;
}

}  // namespace zf
