// zfcore checkpoint verify DIR: the checks a resume makes on a checkpoint (its files, their
// headers and metadata, every tensor against its checksum), without training.
#include "checkpoint/checkpoint.hpp"
#include "cli/commands.hpp"

#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace zf {
namespace fs = std::filesystem;

int command_checkpoint(const std::vector<std::string> &args) {
  if (args.size() != 2 || args[0] != "verify")
    throw UsageError("expected: zfcore checkpoint verify DIR (a checkpoint, a checkpoint directory or a run's "
                     "output directory)");
  const fs::path dir = args[1];
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);  // links followed; a loop is an error, not a throw
  ZF_REQUIRE(!ec || ec.value() != ELOOP,
             "%s: a link that leads back to itself (a link loop): give the checkpoint's real directory", dir.c_str());
  ZF_REQUIRE(!ec || ec.value() == ENOENT, "%s: cannot be read: %s", dir.c_str(), ec.message().c_str());
  ZF_REQUIRE(fs::exists(status), "%s: no such file or directory", dir.c_str());
  ZF_REQUIRE(fs::is_directory(status), "%s is a file, not a directory: give a checkpoint (its step-N directory), a "
             "checkpoint directory or a run's output directory", dir.c_str());
  std::vector<fs::path> checkpoints;
  if (fs::exists(dir / "checkpoint.json")) checkpoints = {dir};
  if (checkpoints.empty()) checkpoints = checkpoints_in(dir);
  if (checkpoints.empty()) checkpoints = checkpoints_in(dir / "checkpoints");
  ZF_REQUIRE(!checkpoints.empty(), "%s holds no checkpoint (step-N directories with a checkpoint.json, or a run's "
             "checkpoints/ directory)", dir.c_str());
  int damaged = 0;
  for (const fs::path &checkpoint : checkpoints) {
    const std::string damage = checkpoint_damage(checkpoint);
    if (!damage.empty()) {
      ++damaged;
      std::printf("%s: damaged: %s\n", checkpoint.c_str(), damage.c_str());
    } else if (!SafetensorsFile::open((checkpoint / "rank-00000.safetensors").string()).has_checksums()) {
      std::printf("%s: readable, without checksums (written by an older zfcore: only its structure was checked)\n",
                  checkpoint.c_str());
    } else {
      std::printf("%s: ok\n", checkpoint.c_str());
    }
  }
  std::printf("%zu checkpoint(s), %d damaged\n", checkpoints.size(), damaged);
  return damaged ? 1 : 0;
}

}  // namespace zf
