// Nothing lost, part 3 (the red-team's root causes): the run's lock is the directory's, held by the
// process, so no file removal lets a second run in; every place a run or an export writes is checked
// before step 1; an interrupted save never blocks a resume; command-line paths stay strings.
#include "files/tiny_run.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using zf::test::kPrecious;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::tiny_run;
using zf::test::write_text;

namespace {

size_t count_lines(const std::string &path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// A tiny run of a million steps into `out`, started in the background (its output in `log`); returns
// once it has logged two steps. The pid is zfcore's own (the shell execs it).
pid_t start_long_run(const std::string &dir, const std::string &out, const std::string &log) {
  std::string command = tiny_run(dir, 1000000);
  command = "exec " + command.substr(command.find(zf::test::zfcore())) + "--set run.output_dir=" + out + " >" + log +
            " 2>&1";
  pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", command.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; i < 1200 && count_lines(out + "/steps.jsonl") < 2; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return pid;
}

int stop(pid_t pid, int signal) {
  kill(pid, signal);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST_CASE("lock: removing .zfcore.lock lets no second run in; a killed run's lock is taken over, with a word",
          "[files]") {
  const std::string dir = scratch_dir("conflicts_lock"), out = dir + "/out";
  const pid_t first = start_long_run(dir, out, dir + "/first.log");
  REQUIRE(count_lines(out + "/steps.jsonl") >= 2);
  CHECK_THAT(read_text(out + "/.zfcore.lock"), Catch::StartsWith("pid " + std::to_string(first) + " on "));
  fs::remove(out + "/.zfcore.lock");
  auto second = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out);
  const std::string first_rows = read_text(out + "/steps.jsonl");
  INFO(second.output);
  CHECK(second.exit_code == 1);
  CHECK_THAT(second.output, Catch::Contains("run.output_dir = \"" + out + "\" is in use by another process"));
  // The first run's step log is its own still (the second would have replaced it with its steps 1-3).
  CHECK(count_lines(out + "/steps.jsonl") >= 2);
  CHECK(stop(first, SIGKILL) != 0);
  CHECK_THAT(read_text(out + "/steps.jsonl"), Catch::StartsWith(first_rows.substr(0, first_rows.find('\n'))));

  // A run killed with its lock file in place: the next run takes the lock over and says so.
  const std::string other = dir + "/other";
  const pid_t killed = start_long_run(dir, other, dir + "/killed.log");
  REQUIRE(count_lines(other + "/steps.jsonl") >= 2);
  CHECK(stop(killed, SIGKILL) != 0);
  auto next = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + other);
  INFO(next.output);
  CHECK(next.exit_code == 0);
  CHECK_THAT(next.output, Catch::Contains(other + "/.zfcore.lock names pid " + std::to_string(killed)) &&
                              Catch::Contains("takes the lock over"));
  // A run that ended leaves the lock free and named by no one: the run after it says nothing of it.
  CHECK(read_text(other + "/.zfcore.lock").empty());
  auto after = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + other);
  CHECK(after.exit_code == 0);
  CHECK_THAT(after.output, !Catch::Contains("takes the lock over"));
}
