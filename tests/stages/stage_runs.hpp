// stage_runs.hpp: runs the zfcore binary on the linear_stack workload under mpirun with a given
// stage and world size, and reads back its summary.
#pragma once

#include "support/process.hpp"

#include <string>

namespace zf::test {

struct StageRun {
  Outcome outcome;
  std::string summary;
  std::string dir;
};

inline StageRun run_stage(const std::string &name, const std::string &stage, int world, const std::string &extra,
                          const std::string &config = source_dir() + "/examples/linear_stack.toml") {
  StageRun r;
  r.dir = scratch_dir(name);
  std::string launcher = world > 1 ? "timeout 120 " + mpirun(world) : "timeout 120 ";
  r.outcome = run_command(launcher + zfcore() + " run " + config + " --set run.output_dir=" + r.dir +
                          " --set run.progress=off --set run.threads=1 --set stage.plugin=" + stage + " " + extra);
  r.summary = read_text(r.dir + "/summary.json");
  return r;
}

}  // namespace zf::test
