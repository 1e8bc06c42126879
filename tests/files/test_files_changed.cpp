// Nothing lost, part 3, continued: what changes under a run is noticed. Data rewritten while a run
// reads it or replaced between a checkpoint and its resume; the output directory moved away and
// recreated by name mid-run; signals during exports and a record that cannot be written; a
// checkpoint whose rank files come from two saves; and the red-team's messages and outputs (an
// export's tokenizer files, a steps.csv with a byte order mark, excerpts, ds.JSON, --unset).
#include "checkpoint/safetensors_header.hpp"
#include "data/token_shard.hpp"
#include "files/tiny_run.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"
#include "runtime/json.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/inotify.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace fs = std::filesystem;
using zf::test::count_lines;
using zf::test::kPrecious;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::start_long_run;
using zf::test::tiny_run;
using zf::test::write_text;

TEST_CASE("changed data: a token shard rewritten in place while a run reads it stops the run, naming the shard",
          "[files]") {
  const std::string dir = scratch_dir("changed_shard"), shard = dir + "/ids.bin";
  std::vector<int64_t> ids(4000);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t((i * 7) % 250);
  zf::write_token_shard(shard, ids, 0);
  const uintmax_t bytes = fs::file_size(shard);
  const pid_t run = start_long_run(dir, dir + "/out", dir + "/run.log", "--set data.type=tokens --set data.path=" + shard);
  REQUIRE(count_lines(dir + "/out/steps.jsonl") >= 2);
  {  // Rewritten in place at the same size, every id 0: what the run maps would change under it.
    std::fstream file(shard, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(zf::kTokenShardHeaderBytes);
    const std::string zeros(bytes - zf::kTokenShardHeaderBytes, '\0');
    file.write(zeros.data(), std::streamsize(zeros.size()));
  }
  REQUIRE(fs::file_size(shard) == bytes);
  const int status = zf::test::wait_for_end(run, 60);
  const std::string log = read_text(dir + "/run.log");
  INFO(log);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  CHECK_THAT(log, Catch::Contains(shard + ": the token shard was written while in use"));
}

TEST_CASE("changed data: a resume on other data than its checkpoint's is refused with the way to go on; the same "
          "data elsewhere resumes", "[files]") {
  const std::string dir = scratch_dir("changed_data"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out).exit_code == 0);
  const std::string trained = read_text(dir + "/train.txt");
  // The same text under another name: the same data, resumed without a word.
  write_text(dir + "/copy.txt", trained);
  auto moved = run_command(tiny_run(dir, 3) + "--set run.output_dir=" + out + " --set data.path=" + dir + "/copy.txt");
  INFO(moved.output);
  CHECK(moved.exit_code == 0);
  CHECK_THAT(moved.output, Catch::Contains("resumed from") && !Catch::Contains("data changed"));

  // data.path replaced by other text of the same size: refused before step 4, saying how to go on.
  std::string other = trained;
  std::reverse(other.begin(), other.end());
  const std::string command = tiny_run(dir, 4) + "--set run.output_dir=" + out;  // (tiny_run writes train.txt)
  write_text(dir + "/train.txt", other);
  auto replaced = run_command(command);
  INFO(replaced.output);
  CHECK(replaced.exit_code == 1);
  CHECK_THAT(replaced.output, Catch::Contains(out + "/checkpoints/step-00000003 was trained on data.path = \"" + dir +
                                              "/copy.txt\"") &&
                                  Catch::Contains("the data changed since the checkpoint") &&
                                  Catch::Contains("checkpoint.resume_data = \"new\""));
  CHECK(read_text(out + "/steps.jsonl").find("\"step\":4") == std::string::npos);
  // The user says so: the run continues on the new data, and says that too.
  write_text(dir + "/train.txt", other);
  auto accepted = run_command(command + " --set checkpoint.resume_data=new");
  INFO(accepted.output);
  CHECK(accepted.exit_code == 0);
  CHECK_THAT(accepted.output, Catch::Contains("continues on it (checkpoint.resume_data = \"new\")"));
  CHECK(read_text(out + "/steps.jsonl").find("\"step\":4") != std::string::npos);
}
