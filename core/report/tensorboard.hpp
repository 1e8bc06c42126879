// tensorboard.hpp: a run's scalars in TensorBoard's own format (run.tensorboard, on by default):
// OUTPUT_DIR/tensorboard/events.out.tfevents.<seconds>.<host>.<pid>.<n>, one file per run (a resumed
// run adds one; TensorBoard reads every file of the directory), written by rank 0 only. Each record
// is a protobuf Event (report/tensorboard.proto, encoded by libprotobuf) framed as TFRecord: its
// length and the data, each followed by its masked CRC-32C (Boost.CRC). `tensorboard --logdir runs`
// then shows every run. A resumed run's file starts with a START session log at its first step, so
// that TensorBoard drops the steps the old file holds from there on (the old run may have trained
// past the checkpoint before it stopped) and shows each step once; so does the file of a run that
// starts over at step 1 beside an earlier run's files (one stopped before its first checkpoint).
#pragma once

#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace zf {

class TensorBoardWriter {
 public:
  // Creates `directory` and a new event file in it, starting with the file-version event; after a
  // resume from `resumed_step` (> 0), or when the directory holds an earlier event file, then the
  // START session log at step resumed_step + 1.
  explicit TensorBoardWriter(const std::filesystem::path &directory, int64_t resumed_step = 0);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter &) = delete;
  TensorBoardWriter &operator=(const TensorBoardWriter &) = delete;
  // One event with the step's scalars, flushed (TensorBoard shows it while the run goes on). A
  // write that fails (a full disk) says so once and stops the file; training goes on.
  void write(int64_t step, const std::vector<std::pair<std::string, double>> &scalars);
  const std::filesystem::path &path() const { return path_; }

 private:
  void append(const std::string &event);
  std::filesystem::path path_;
  std::FILE *file_ = nullptr;
};

}  // namespace zf
