// zfcore: the command line. run / validate / plugins / bench / --version.
#include "cli/commands.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char *kUsage =
    "usage: zfcore <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run FILE [--set table.key=value]...       train as FILE (TOML) says\n"
    "  validate FILE [--set table.key=value]...  check FILE and the plugins it names, run nothing\n"
    "  plugins [--params]                        list the plugins found (and their parameters)\n"
    "  estimate FILE [--world N] [--set ...]     per-rank memory of FILE's model for each ZeRO stage\n"
    "  bench optimizer [options]                 compare CPU optimizers (zfcore bench optimizer --help)\n"
    "  bench stages|offload|zenflow|binding      train configurations side by side and recommend one\n"
    "  --version                                 print the version and ABI\n";

}  // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (command == "--version" || command == "-V" || command == "version") return zf::command_version();
    if (command == "run") return zf::command_run(rest);
    if (command == "validate") return zf::command_validate(rest);
    if (command == "plugins") return zf::command_plugins(rest);
    if (command == "bench") return zf::command_bench(rest);
    if (command == "estimate") return zf::command_estimate(rest);
    std::fprintf(stderr, "zfcore: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const zf::UsageError &error) {
    std::fprintf(stderr, "zfcore %s: %s\n", command.c_str(), error.what());
    return 2;
  } catch (const std::exception &error) {
    zf::log_error(zf::error_message(error));
    return 1;
  }
}
