// tiny_run.hpp: what the files tests share: their run, a tiny GPT on a short text file, and the
// user's files they plant beside it.
#pragma once

#include "support/process.hpp"

#include <fstream>
#include <string>

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

}  // namespace zf::test
