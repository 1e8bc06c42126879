// The run's own output files under the filesystem rule, as a hostile user meets them: a directory
// given as run.output_dir that holds the user's files at the run's names, run names and paths that
// are not ASCII, a name ending in a blank, and a file in tensorboard/ named for a far future second.
#include "runtime/files.hpp"
#include "files/tiny_run.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using zf::test::kPrecious;
using zf::test::tiny_run;
using zf::test::read_text;
using zf::test::run_command;
using zf::test::scratch_dir;
using zf::test::write_text;

TEST_CASE("runs: a run.output_dir holding the user's files at the run's names is refused, an older run's resumes",
          "[files]") {
  const std::string dir = scratch_dir("outputs_user_files"), data = dir + "/data";
  fs::create_directories(data);
  for (const char *name : {"summary.json", "report.html", "steps.csv"}) write_text(data + "/" + name, kPrecious);
  auto refused = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + data);
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("holds summary.json, steps.csv, report.html") ||
                                 Catch::Contains("which no zfcore run wrote"));
  for (const char *name : {"summary.json", "report.html", "steps.csv"}) CHECK(read_text(data + "/" + name) == kPrecious);
  CHECK(!fs::exists(data + "/checkpoints"));  // refused before anything was trained or saved

  // A directory where the step log goes is named as such, before step 1.
  const std::string in_the_way = dir + "/in_the_way";
  fs::create_directories(in_the_way + "/steps.csv");
  auto directory = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + in_the_way);
  INFO(directory.output);
  CHECK(directory.exit_code == 1);
  CHECK_THAT(directory.output, Catch::Contains(in_the_way + "/steps.csv is a directory, not a file a run wrote"));

  // A run directory of an older zfcore (no .zfcore-run, its own step log) is still resumed.
  const std::string older = dir + "/older";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + older).exit_code == 0);
  fs::remove(older + "/.zfcore-run");
  auto resumed = run_command(tiny_run(dir, 4) + "--set run.output_dir=" + older);
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  CHECK(read_text(older + "/steps.jsonl").find("{\"step\":4,") != std::string::npos);
}

TEST_CASE("runs: a run.name ending in a blank runs again in its own directory", "[files]") {
  const std::string dir = scratch_dir("outputs_name_blank"), out = dir + "/out";
  REQUIRE(run_command(tiny_run(dir, 2) + "--set 'run.name=x ' --set run.output_dir=" + out).exit_code == 0);
  auto again = run_command(tiny_run(dir, 4) + "--set 'run.name=x ' --set run.output_dir=" + out);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains("resumed from"));
}

TEST_CASE("runs: a file in tensorboard/ named for a far future second neither stops the run nor is touched",
          "[files]") {
  const std::string dir = scratch_dir("outputs_tensorboard_future"), out = dir + "/out";
  fs::create_directories(out + "/tensorboard");
  const std::string future = "events.out.tfevents.99999999999999.elsewhere";
  write_text(out + "/tensorboard/" + future, kPrecious);
  auto run = run_command(tiny_run(dir, 2, 30) + "--set run.tensorboard=true --set run.output_dir=" + out);
  INFO(run.output);
  CHECK(run.exit_code == 0);  // not 124: the name of the new event file was searched for without end
  CHECK(read_text(out + "/tensorboard/" + future) == kPrecious);
  // The run's own file sorts after it, so TensorBoard reads it last.
  std::string newest;
  for (const auto &entry : fs::directory_iterator(out + "/tensorboard"))
    newest = std::max(newest, entry.path().filename().string());
  CHECK(newest > future);
  CHECK(fs::file_size(out + "/tensorboard/" + newest) > 0);
}

TEST_CASE("runs: an output directory whose name is not UTF-8 resumes its checkpoints and writes JSON that parses, "
          "and a run.name that is not UTF-8 is refused before step 1", "[files]") {
  const std::string dir = scratch_dir("outputs_latin1"), out = dir + "/r\xe9sultats";  // Latin-1, as some systems name
  REQUIRE(run_command(tiny_run(dir, 2) + "--set 'run.output_dir=" + out + "'").exit_code == 0);
  auto resumed = run_command(tiny_run(dir, 4) + "--set 'run.output_dir=" + out + "'");
  INFO(resumed.output);
  CHECK(resumed.exit_code == 0);
  CHECK_THAT(resumed.output, Catch::Contains("resumed from"));
  CHECK(!fs::exists(out + "/checkpoints/step-00000002.damaged"));
  for (const char *name : {"summary.json", "checkpoints/step-00000004/checkpoint.json"})
    CHECK_NOTHROW(nlohmann::json::parse(read_text(out + "/" + name)));

  auto name = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/named --set 'run.name=r\xe9'");
  INFO(name.output);
  CHECK(name.exit_code == 1);
  CHECK_THAT(name.output, Catch::Contains("run.name") && Catch::Contains("is not UTF-8 text (byte 0xE9 at 1"));
  CHECK(!fs::exists(dir + "/named/checkpoints"));  // nothing trained to be lost at the first save
}

TEST_CASE("files: a directory where a file is written is named as one in the way", "[files]") {
  const std::string dir = scratch_dir("outputs_directory_in_way");
  fs::create_directories(dir + "/out/result.json");
  const zf::Directory out = zf::Directory::open(dir + "/out", false);
  CHECK_THROWS_WITH(out.write_atomically("result.json", "{}\n"),
                    Catch::Contains(dir + "/out/result.json: a directory of that name is in the way"));
  CHECK(fs::is_directory(dir + "/out/result.json"));
}

TEST_CASE("messages: a socket named .zfcore.lock and a checkpoint given as model.init_from say what they are",
          "[files]") {
  const std::string dir = scratch_dir("outputs_socket_checkpoint"), out = dir + "/out";
  fs::create_directories(out);
  const int bound = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string lock = out + "/.zfcore.lock";
  REQUIRE(lock.size() < sizeof address.sun_path);
  std::strcpy(address.sun_path, lock.c_str());
  REQUIRE(bind(bound, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0);
  close(bound);
  auto socket_lock = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + out);
  INFO(socket_lock.output);
  CHECK(socket_lock.exit_code == 1);
  CHECK_THAT(socket_lock.output, Catch::Contains(lock + " is a socket or a FIFO, not a regular file: remove it"));

  REQUIRE(run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/first").exit_code == 0);
  const std::string checkpoint = dir + "/first/checkpoints/step-00000002";
  auto init = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + dir + "/second --set model.init_from=" + checkpoint);
  INFO(init.output);
  CHECK(init.exit_code == 1);
  CHECK_THAT(init.output, Catch::Contains(checkpoint + " is a zfcore training checkpoint, not a Hugging Face model") &&
                              Catch::Contains("checkpoint.resume = \"" + checkpoint + "\""));
}

TEST_CASE("runs: a run.output_dir that is a link to nowhere is named as one, and nothing is created there",
          "[files]") {
  const std::string dir = scratch_dir("outputs_dangling_link"), link = dir + "/out", target = dir + "/gone/away";
  fs::create_directory_symlink(target, link);
  auto refused = run_command(tiny_run(dir, 2) + "--set run.output_dir=" + link);
  INFO(refused.output);
  CHECK(refused.exit_code == 1);
  CHECK_THAT(refused.output, Catch::Contains("cannot write there (it is a symbolic link to " + target +
                                             ", which does not exist"));
  CHECK(!fs::exists(dir + "/gone"));
  CHECK(fs::is_symlink(link));
}
