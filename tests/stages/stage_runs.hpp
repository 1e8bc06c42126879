// stage_runs.hpp: runs the zfcore binary on the linear_stack workload under mpirun with a given
// stage and world size, and reads back its summary.
#pragma once

#include <cstdio>

#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <string>

namespace zf::test {

struct StageRun {
  Outcome outcome;
  std::string summary;
  std::string dir;
};

inline std::string default_stage_config() { return source_dir() + "/examples/linear_stack.toml"; }

// The command line of such a run, writing into `dir`.
inline std::string stage_command(const std::string &dir, const std::string &stage, int world, const std::string &extra,
                                 const std::string &config) {
  std::string launcher = world > 1 ? "timeout 120 " + mpirun(world) : "timeout 120 ";
  return launcher + zfcore() + " run " + config + " --set run.output_dir=" + dir +
         " --set run.progress=off --set run.threads=1 --set stage.plugin=" + stage + " " + extra;
}

inline StageRun run_stage(const std::string &name, const std::string &stage, int world, const std::string &extra,
                          const std::string &config = default_stage_config()) {
  StageRun r;
  r.dir = scratch_dir(name);
  r.outcome = run_command(stage_command(r.dir, stage, world, extra, config));
  r.summary = read_text(r.dir + "/summary.json");
  return r;
}

// The loss of each step in a run's steps.jsonl, as written.
inline std::map<int, std::string> step_losses(const std::string &dir) {
  std::map<int, std::string> out;
  std::ifstream in(dir + "/steps.jsonl");
  std::string line;
  while (std::getline(in, line)) out[std::stoi(json_field(line, "step"))] = json_field(line, "loss");
  return out;
}

// A number field of a summary (the field must be there).
inline double json_number(const std::string &json, const std::string &key) {
  std::string text = json_field(json, key);
  INFO(key << " in " << json);
  REQUIRE_FALSE(text.empty());
  return std::stod(text);
}

// run_stage that must succeed (its output shown when it does not).
inline StageRun run_stage_ok(const std::string &name, const std::string &stage, int world, const std::string &extra,
                             const std::string &config = default_stage_config()) {
  StageRun r = run_stage(name, stage, world, extra, config);
  INFO(name << "\n" << r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  return r;
}

// A run interrupted and continued: `first_steps` steps (checkpointing as `extra` says), then the same
// command with train.steps = `steps` in the same directory, which resumes from the newest checkpoint.
struct ResumedRun {
  Outcome first;
  StageRun resumed;
};
// resume_step > 0: the second run resumes from the first's checkpoint of that step (one inside the
// run, where ZenFlow has CPU updates in flight; the one at its end holds a finished run).
// resumed_extra: --set overrides the second run adds (the last --set of a key wins).
inline ResumedRun run_resumed(const std::string &name, const std::string &stage, int world, const std::string &extra,
                              int64_t first_steps, int64_t steps, const std::string &config = default_stage_config(),
                              int64_t resume_step = 0, const std::string &resumed_extra = "") {
  ResumedRun r;
  r.resumed.dir = scratch_dir(name);
  std::string command = stage_command(r.resumed.dir, stage, world, extra, config);
  r.first = run_command(command + " --set train.steps=" + std::to_string(first_steps));
  if (r.first.exit_code != 0) return r;
  char from[64];
  std::snprintf(from, sizeof from, "/checkpoints/step-%08lld", (long long)resume_step);
  r.resumed.outcome = run_command(command + " --set train.steps=" + std::to_string(steps) +
                                  (resume_step > 0 ? " --set checkpoint.resume=" + r.resumed.dir + from : "") + " " +
                                  resumed_extra);
  r.resumed.summary = read_text(r.resumed.dir + "/summary.json");
  return r;
}

// Both halves ran, and the second continued from a checkpoint (their output shown when not).
inline void require_resumed(const ResumedRun &r) {
  INFO(r.first.output);
  REQUIRE(r.first.exit_code == 0);
  INFO(r.resumed.outcome.output);
  REQUIRE(r.resumed.outcome.exit_code == 0);
  CHECK(r.resumed.outcome.output.find("resumed from") != std::string::npos);
}

// The row of `zfcore estimate`'s table headed `table` (e.g. "offload cpu_optimizer") that stands
// for the config's own stage, up to its "<- this" mark.
inline std::string chosen_estimate_row(const std::string &output, const std::string &table) {
  const size_t at = output.find(table);
  REQUIRE(at != std::string::npos);
  const size_t chosen = output.find("<- this", at);
  REQUIRE(chosen != std::string::npos);
  const size_t line = output.rfind('\n', chosen);
  return output.substr(line, chosen - line);
}

}  // namespace zf::test
