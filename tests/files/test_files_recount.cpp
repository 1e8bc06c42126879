// Nothing lost, part 3, the recount: variants of the red-team's root causes that main still missed.
// Every rank writes under the directories it opened at the start (root cause 4 under mpirun).
#include "files/tiny_run.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using zf::test::count_lines;
using zf::test::kPrecious;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::tiny_run;
using zf::test::write_text;

namespace {

// `command` started in the background by the shell, which execs it (the pid is its own).
pid_t start(const std::string &command) {
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

std::vector<std::string> entries(const std::string &dir) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir)) found.push_back(entry.path().filename().string());
  return found;
}

}  // namespace

TEST_CASE("moved directories under mpirun: every rank keeps writing into the output directory and checkpoint.dir it "
          "started with, never into new ones of their names", "[files]") {
  const std::string dir = scratch_dir("recount_moved_ranks"), out = dir + "/out", ck = dir + "/ck";
  std::string command = tiny_run(dir, 40);
  command = zf::test::mpirun(2) + command.substr(command.find(zf::test::zfcore())) + "--set checkpoint.every=1" +
            " --set run.output_dir=" + out + " --set checkpoint.dir=" + ck + " >" + dir + "/run.log 2>&1";
  const pid_t run = start("timeout 120 " + command);
  for (int i = 0; i < 1200 && count_lines(out + "/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  fs::rename(out, dir + "/out.moved");
  fs::rename(ck, dir + "/ck.moved");
  fs::create_directories(out);
  fs::create_directories(ck);
  write_text(out + "/summary.json", kPrecious);  // the user's, in new directories of the old names
  write_text(ck + "/notes.txt", kPrecious);
  const int status = zf::test::wait_for_end(run, 120);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_text(out + "/summary.json") == kPrecious);
  CHECK(entries(out) == std::vector<std::string>{"summary.json"});
  CHECK(entries(ck) == std::vector<std::string>{"notes.txt"});
  // Both ranks' files of the last checkpoint are where the run started, and the run's outputs too.
  CHECK(fs::exists(dir + "/ck.moved/step-00000040/rank-00000.safetensors"));
  CHECK(fs::exists(dir + "/ck.moved/step-00000040/rank-00001.safetensors"));
  CHECK(zf::test::json_field(read_text(dir + "/out.moved/summary.json"), "steps") == "40");
  CHECK(count_lines(dir + "/out.moved/steps.jsonl") == 40);
}
