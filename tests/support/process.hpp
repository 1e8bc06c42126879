// process.hpp: runs a shell command for tests and captures its exit code and output
// (stdout and stderr together), and reads files and JSON fields of the run outputs.
#pragma once

#include <cstdint>
#include <string>

namespace zf::test {

struct Outcome {
  int exit_code = -1;
  std::string output;
};

Outcome run_command(const std::string &command);
std::string read_text(const std::string &path);
// The value of "key" in a flat JSON object, as text (quotes removed); "" when absent.
std::string json_field(const std::string &json, const std::string &key);
// The bytes of ledger tag "tier.tag" in a summary.json: at the end of the run (section
// "memory_bytes") or the most it held at once ("memory_peak_bytes"); 0 when it held nothing.
uint64_t ledger_bytes(const std::string &summary, const std::string &section, const std::string &tag);
// "" when every step of a steps.jsonl took at least its forward, backward and optimizer step
// (timers fwd + bwd + step: one after another inside the step, on the host or on one GPU stream),
// else the first step that did not.
std::string steps_shorter_than_timers(const std::string &steps_jsonl);
// A fresh empty directory under the build tree's test scratch space.
std::string scratch_dir(const std::string &name);
// Writes `text` to dir/name (replacing it) and returns that path.
std::string write_file(const std::string &dir, const std::string &name, const std::string &text);
// The first line of `output` that holds `part` ("" when none does).
std::string line_with(const std::string &output, const std::string &part);

// Paths baked in by CMake.
inline std::string zfcore() { return ZF_TEST_BINARY_DIR "/bin/zfcore"; }
inline std::string source_dir() { return ZF_TEST_SOURCE_DIR; }
inline std::string binary_dir() { return ZF_TEST_BINARY_DIR; }

}  // namespace zf::test

namespace zf::test {
// The MPI launcher with what it needs on any machine (root, more ranks than cores).
inline std::string mpirun(int ranks) {
  return std::string(ZF_TEST_MPIEXEC) + " --allow-run-as-root --oversubscribe --bind-to none -np " +
         std::to_string(ranks) + " ";
}
}  // namespace zf::test
