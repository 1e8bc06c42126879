// tiny_run.hpp: what the files tests share: their run, a tiny GPT on a short text file, and the
// user's files they plant beside it.
#pragma once

#include "support/process.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace zf::test {

// The quickstart as a tiny GPT on a short text written into `data_dir`: a run of a few steps takes
// about a second. Every command is bounded by `timeout`: a FIFO that were waited on, or a run that
// hangs, fails the test (124) instead of hanging it.
inline std::string tiny_run(const std::string &data_dir, int steps = 2, int timeout_s = 120) {
  std::ofstream train(data_dir + "/train.txt");
  for (int i = 0; i < 40; ++i) train << "Line " << i << ": the quick brown fox jumps over " << i % 13 << " dogs.\n";
  return "timeout " + std::to_string(timeout_s) + " " + zfcore() + " run " + source_dir() +
         "/examples/quickstart.toml --set run.progress=off --set model.hidden=32 --set model.layers=1" +
         " --set model.heads=2 --set model.max_seq=32 --set data.seq_len=32 --set data.path=" + data_dir + "/train.txt" +
         " --set data.eval_fraction=0 --set train.micro_batch=2 --set train.eval_every=0 --set sample.tokens=0" +
         " --set train.warmup_steps=0 --set train.steps=" + std::to_string(steps) + " ";
}

// A file of the user's, written as a user would.
inline void write_text(const std::string &path, const std::string &text) { std::ofstream(path) << text; }

// What the user's own files hold: a test checks it is still there, byte for byte.
inline const char *const kPrecious = "the user's own file\n";

inline size_t count_lines(const std::string &path) {
  std::ifstream in(path);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// A tiny run of a million steps into `out` (with `more` --set words), started in the background (its
// output in `log`); returns once it has logged two steps. The pid is zfcore's own (the shell execs it).
inline pid_t start_long_run(const std::string &dir, const std::string &out, const std::string &log,
                            const std::string &more = "") {
  std::string command = tiny_run(dir, 1000000);
  command = "exec " + command.substr(command.find(zfcore())) + more + " --set run.output_dir=" + out + " >" + log +
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

// Sends `signal` and waits: the wait status.
inline int stop(pid_t pid, int signal) {
  kill(pid, signal);
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Waits up to `seconds` for the process to end by itself: its wait status, or -1 (it is then killed).
inline int wait_for_end(pid_t pid, int seconds) {
  int status = 0;
  for (int i = 0; i < seconds * 20; ++i) {
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop(pid, SIGKILL);
  return -1;
}

}  // namespace zf::test
