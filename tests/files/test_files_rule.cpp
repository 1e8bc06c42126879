// The filesystem rule itself: what zfcore writes, renames and removes through runtime/files.hpp, and
// what it reads through runtime/input.hpp.
#include "files/tiny_run.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using zf::test::read_text;
using zf::test::scratch_dir;
using zf::test::write_text;

namespace {
size_t entries_in(const std::string &dir) {
  return size_t(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}
}  // namespace

TEST_CASE("files: an atomic write replaces a link named like the file, never the file it points to", "[files]") {
  const std::string dir = scratch_dir("files_link");
  write_text(dir + "/victim", "precious\n");
  fs::create_directory(dir + "/out");
  fs::create_symlink(dir + "/victim", dir + "/out/summary.json");
  zf::Directory out = zf::Directory::open(dir + "/out", false);
  out.write_atomically("summary.json", "{}\n");
  CHECK(read_text(dir + "/victim") == "precious\n");
  CHECK(!fs::is_symlink(dir + "/out/summary.json"));
  CHECK(read_text(dir + "/out/summary.json") == "{}\n");
  CHECK(entries_in(dir + "/out") == 1);  // no temporary left
}

TEST_CASE("files: appending refuses a link and a FIFO named like the file", "[files]") {
  const std::string dir = scratch_dir("files_append");
  write_text(dir + "/victim", "precious\n");
  fs::create_symlink(dir + "/victim", dir + "/steps.jsonl");
  REQUIRE(mkfifo((dir + "/steps.csv").c_str(), 0644) == 0);
  zf::Directory out = zf::Directory::open(dir, false);
  CHECK_THROWS_WITH(out.open_append("steps.jsonl"), Catch::Contains("symbolic link"));
  CHECK_THROWS_WITH(out.open_append("steps.csv"), Catch::Contains("not a regular file"));  // and does not hang
  CHECK(read_text(dir + "/victim") == "precious\n");
  int fd = out.open_append("new.log");
  CHECK(fd >= 0);
  close(fd);
}

TEST_CASE("files: a subdirectory that is a link is refused, whether or not it is to be created", "[files]") {
  const std::string dir = scratch_dir("files_subdirectory_link");
  fs::create_directory(dir + "/elsewhere");
  fs::create_directory_symlink(dir + "/elsewhere", dir + "/tensorboard");
  zf::Directory out = zf::Directory::open(dir, false);
  for (bool create : {true, false})
    CHECK_THROWS_WITH(out.subdirectory("tensorboard", create),
                      Catch::Contains(dir + "/tensorboard is a symbolic link"));
  CHECK(fs::is_empty(dir + "/elsewhere"));
}

TEST_CASE("files: a pending file never committed leaves the old file and no temporary", "[files]") {
  const std::string dir = scratch_dir("files_pending");
  write_text(dir + "/config.json", "old\n");
  write_text(dir + "/user.tmp", "the user's own\n");
  zf::Directory out = zf::Directory::open(dir, false);
  {
    zf::PendingFile weights(out, "model.safetensors"), config(out, "config.json");
    weights.write("new weights");
    config.write("new\n");
    // a failure before commit_together: both dropped
  }
  CHECK(read_text(dir + "/config.json") == "old\n");
  CHECK(read_text(dir + "/user.tmp") == "the user's own\n");
  CHECK(!fs::exists(dir + "/model.safetensors"));
  CHECK(entries_in(dir) == 2);
  {
    zf::PendingFile weights(out, "model.safetensors"), config(out, "config.json");
    weights.write("new weights");
    config.write("new\n");
    zf::commit_together({&weights, &config});
  }
  CHECK(read_text(dir + "/config.json") == "new\n");
  CHECK(read_text(dir + "/model.safetensors") == "new weights");
  CHECK(entries_in(dir) == 3);
  // A directory in the way of the second file: refused before the first rename.
  fs::create_directories(dir + "/generation_config.json/inside");
  {
    zf::PendingFile weights(out, "model.safetensors"), generation(out, "generation_config.json");
    weights.write("newer weights");
    CHECK_THROWS_WITH(zf::commit_together({&weights, &generation}), Catch::Contains("a directory of that name"));
  }
  CHECK(read_text(dir + "/model.safetensors") == "new weights");
  CHECK(entries_in(dir) == 4);
}

TEST_CASE("files: a new file is never an existing entry, and a file of two names is not appended to", "[files]") {
  const std::string dir = scratch_dir("files_new");
  write_text(dir + "/victim", "precious\n");
  fs::create_symlink(dir + "/victim", dir + "/row.log");
  fs::create_hard_link(dir + "/victim", dir + "/steps.jsonl");
  zf::Directory out = zf::Directory::open(dir, false);
  CHECK_THROWS_WITH(out.create_new("row.log"), Catch::Contains("exists already"));
  CHECK_THROWS_WITH(out.open_append("steps.jsonl"), Catch::Contains("hard links"));
  zf::write_file_atomically(dir + "/row.log", "mine\n");  // replaces the link, not the victim
  CHECK(read_text(dir + "/victim") == "precious\n");
  CHECK(read_text(dir + "/row.log") == "mine\n");
  int fd = out.create_new("fresh.log");
  CHECK(fd >= 0);
  close(fd);
}

TEST_CASE("files: only directories with this owner's marker are removed, links inside never followed",
          "[files]") {
  const std::string dir = scratch_dir("files_owned");
  fs::create_directories(dir + "/step-notes");
  write_text(dir + "/step-notes/README", "mine\n");
  fs::create_directories(dir + "/elsewhere");
  write_text(dir + "/elsewhere/keep", "keep\n");
  zf::Directory parent = zf::Directory::open(dir, false);
  {
    zf::Directory made = parent.create_owned("step-1.tmp", "run-a");
    made.write_atomically("weights", "w");
    made.subdirectory("nested", true).write_atomically("x", "x");
  }
  fs::create_directory_symlink(dir + "/elsewhere", dir + "/step-1.tmp/link");
  CHECK(parent.owner_of("step-1.tmp") == "run-a");
  CHECK(parent.owner_of("step-notes").empty());
  CHECK_THAT(parent.remove_owned("step-notes", "*"), Catch::Contains("zfcore did not create it"));
  CHECK_THAT(parent.remove_owned("step-1.tmp", "run-b"), Catch::Contains("belongs to run-a"));
  CHECK(fs::exists(dir + "/step-1.tmp/weights"));
  CHECK(parent.remove_owned("step-1.tmp", "run-a").empty());
  CHECK(!fs::exists(dir + "/step-1.tmp"));
  CHECK(read_text(dir + "/elsewhere/keep") == "keep\n");
  CHECK(read_text(dir + "/step-notes/README") == "mine\n");
  CHECK(parent.rename_entry("step-notes", "elsewhere").find("cannot rename") == 0);  // never replaces
  CHECK(!parent.remove_own_file("step-notes").empty());  // not a name this process generated
}

TEST_CASE("files: entry names and paths inside a directory", "[files]") {
  for (const char *bad : {"", ".", "..", "a/b", "../x"}) CHECK(!zf::entry_name_problem(bad).empty());
  CHECK(zf::entry_name_problem("run-1.x").empty());
  const std::string dir = scratch_dir("files_inside");
  fs::create_directories(dir + "/model/sub");
  write_text(dir + "/outside.safetensors", "x");
  fs::create_symlink(dir + "/outside.safetensors", dir + "/model/escape.safetensors");
  fs::create_symlink("sub", dir + "/model/inner");
  const std::string model = dir + "/model";
  CHECK(zf::path_inside_problem(model, "sub/a.safetensors").empty());
  CHECK(zf::path_inside_problem(model, "inner/a.safetensors").empty());
  CHECK_THAT(zf::path_inside_problem(model, "/etc/passwd"), Catch::Contains("absolute"));
  CHECK_THAT(zf::path_inside_problem(model, "../outside.safetensors"), Catch::Contains(".."));
  CHECK_THAT(zf::path_inside_problem(model, "sub/../../outside.safetensors"), Catch::Contains(".."));
  CHECK_THAT(zf::path_inside_problem(model, "escape.safetensors"), Catch::Contains("outside"));
}

TEST_CASE("files: a JSON input that is a FIFO, too deep or too large is refused, not read", "[files]") {
  const std::string dir = scratch_dir("files_json");
  REQUIRE(mkfifo((dir + "/fifo.json").c_str(), 0644) == 0);
  CHECK_THROWS_WITH(zf::read_json_file(dir + "/fifo.json"), Catch::Contains("FIFO"));
  write_text(dir + "/deep.json", std::string(100000, '[') + std::string(100000, ']'));
  CHECK_THROWS_WITH(zf::read_json_file(dir + "/deep.json"), Catch::Contains("nest deeper"));
  write_text(dir + "/big.json", "[" + std::string(2000, ' ') + "]");
  CHECK_THROWS_WITH(zf::read_json_file(dir + "/big.json", 1000), Catch::Contains("larger than 1000 bytes"));
  write_text(dir + "/ok.json", "{\"a\": 1}");
  CHECK(zf::read_json_file(dir + "/ok.json")["a"] == 1);
}
