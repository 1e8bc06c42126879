// `zfcore bench disk PATH`: 64 MiB written and read back with each engine, the console line and
// the JSON agree, the temporary file is gone afterwards; a bad PATH is a located error and a bad
// flag a usage error.
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace fs = std::filesystem;

namespace {

zf::test::Outcome disk(const std::string &args) {
  return zf::test::run_command("timeout 60 " + zf::test::zfcore() + " bench disk " + args);
}

}  // namespace

TEST_CASE("bench disk: each engine writes and reads back, JSON, no file left behind", "[bench]") {
  const std::string dir = zf::test::scratch_dir("bench_disk");
  const std::string target = dir + "/target";
  fs::create_directories(target);
  for (const std::string engine : {"threads", "auto", "io_uring"}) {
    const std::string json = dir + "/" + engine + ".json";
    auto outcome =
        disk(target + " --size-gb 0.0625 --block-mb 1 --queue-depth 8 --engine " + engine + " --json " + json);
    INFO(engine << "\n" << outcome.output);
    if (engine == "io_uring" && outcome.exit_code != 0) {
      // A sandbox that refuses io_uring: forcing it is an error that says so; auto fell back.
      CHECK_THAT(outcome.output, Catch::Contains("io_uring is refused here"));
      continue;
    }
    REQUIRE(outcome.exit_code == 0);
    CHECK(fs::is_empty(target));  // the file was unlinked as soon as it was open

    nlohmann::json result = nlohmann::json::parse(zf::test::read_text(json));
    CHECK(result["path"] == target);
    CHECK(result["bytes"] == 64ull << 20);
    CHECK(result["block_bytes"] == 1ull << 20);
    CHECK(result["queue_depth"] == 8);
    CHECK(result["write_gbps"].get<double>() > 0);
    CHECK(result["read_gbps"].get<double>() > 0);
    CHECK(result["write_seconds"].get<double>() > 0);
    CHECK(result["read_seconds"].get<double>() > 0);
    const std::string used = result["engine"];
    if (engine == "auto") {
      CHECK((used == "io_uring" || used == "threads"));
      if (used == "threads") CHECK_THAT(outcome.output, Catch::Contains("io_uring refused here"));
    } else {
      CHECK(used == engine);
    }
    // The build tree is on a disk filesystem: O_DIRECT is taken, else the output says why not.
    if (!result["direct"].get<bool>())
      CHECK_THAT(outcome.output, Catch::Contains("O_DIRECT refused by this filesystem"));
    const std::string mode = result["direct"].get<bool>() ? "O_DIRECT" : "buffered";
    CHECK_THAT(outcome.output, Catch::Contains("disk " + target + ": write ") &&
                                   Catch::Contains("(" + mode + ", " + used + ", 64 MiB, 1 MiB blocks, 8 in flight)"));
  }
}

TEST_CASE("bench disk: a PATH that is no directory, too little space, bad flags", "[bench]") {
  const std::string dir = zf::test::scratch_dir("bench_disk_errors");
  struct Case {
    std::string args, message;
    int exit_code;
  };
  for (const Case &c : {Case{dir + "/missing", dir + "/missing: No such file or directory", 1},
                        Case{zf::test::source_dir() + "/README.md", "README.md: not a directory", 1},
                        Case{dir + " --size-gb 60000", dir + ": not enough free space", 1},
                        Case{dir + " --queue-depth 0", "--queue-depth 0: expected an integer from 1 to 1024", 2},
                        Case{dir + " --block-mb 0.001", "--block-mb 0.001: a block must be a multiple of 4 KiB", 2},
                        Case{dir + " --size-gb -1", "--size-gb -1: expected a number in (0, 65536]", 2},
                        Case{dir + " --engine libaio", "--engine libaio: expected one of auto, io_uring, threads", 2},
                        Case{"--size-gb 1", "which directory? PATH is missing", 2}}) {
    auto outcome = disk(c.args);
    INFO(c.args << "\n" << outcome.output);
    CHECK(outcome.exit_code == c.exit_code);
    CHECK_THAT(outcome.output, Catch::Contains(c.message));
    CHECK(fs::is_empty(dir));
  }
}
