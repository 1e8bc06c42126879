// Config errors: every bad file gives a non-zero exit and a message with file:line:col (the
// corpus in tests/config/bad/, each file's first line says what to expect); --set overrides go
// through the same checks; a good file yields the values it says.
#include "config/config.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>

using namespace zf;

TEST_CASE("each bad config file fails validation with a located message", "[config]") {
  std::filesystem::path corpus = test::source_dir() + "/tests/config/bad";
  int files = 0;
  for (const auto &entry : std::filesystem::directory_iterator(corpus)) {
    std::string text = test::read_text(entry.path());
    std::string first_line = text.substr(0, text.find('\n'));
    REQUIRE(first_line.rfind("# expect: ", 0) == 0);
    std::string expected = first_line.substr(10);
    // Messages name the file as given on the command line; run from the corpus directory.
    auto outcome = test::run_command("cd " + corpus.string() + " && " + test::zfcore() + " validate " +
                                     entry.path().filename().string());
    INFO(entry.path().filename().string() << "\n" << outcome.output);
    CHECK(outcome.exit_code != 0);
    CHECK_THAT(outcome.output, Catch::Contains(expected));
    ++files;
  }
  CHECK(files >= 12);
}

TEST_CASE("a missing config file is a located error", "[config]") {
  auto outcome = test::run_command(test::zfcore() + " run no_such_file.toml");
  CHECK(outcome.exit_code != 0);
  CHECK_THAT(outcome.output, Catch::Contains("no_such_file.toml:1:1: cannot read the config file"));
}

TEST_CASE("command-line overrides (--set) are checked like the file", "[config]") {
  std::string quickstart = test::source_dir() + "/examples/linear_stack.toml";
  auto bad_type = test::run_command(test::zfcore() + " validate " + quickstart + " --set optimizer.lr=abc");
  CHECK(bad_type.exit_code != 0);
  CHECK_THAT(bad_type.output, Catch::Contains("--set optimizer.lr=abc: optimizer.lr = \"abc\": must be a number"));
  auto bad_key = test::run_command(test::zfcore() + " validate " + quickstart + " --set train.stpes=3");
  CHECK(bad_key.exit_code != 0);
  CHECK_THAT(bad_key.output, Catch::Contains("--set train.stpes=3: unknown key 'stpes' in [train]; did you mean 'steps'?"));
  auto bad_form = test::run_command(test::zfcore() + " validate " + quickstart + " --set lr=3");
  CHECK(bad_form.exit_code != 0);
  CHECK_THAT(bad_form.output, Catch::Contains("expected --set table.key=value"));
  auto good = test::run_command(test::zfcore() + " validate " + quickstart + " --set optimizer.lr=3e-4");
  INFO(good.output);
  CHECK(good.exit_code == 0);
}

TEST_CASE("a good config yields its values, defaults and overrides", "[config]") {
  RunConfig config = RunConfig::parse(
      "[run]\nname = \"t\"\nplugin_path = [\"/a\", \"/b\"]\n[train]\nsteps = 7\n"
      "[optimizer]\nplugin = [\"cpu_adam\", \"adamw_ref\"]\nlr = 1\nthreads = 3\n",
      "inline.toml", {"train.micro_batch=5", "optimizer.beta2=0.95"});
  CHECK(config.string("run", "name") == "t");
  CHECK(config.integer("train", "steps") == 7);
  CHECK(config.integer("train", "micro_batch") == 5);
  CHECK(config.integer("train", "grad_accum") == 1);      // default
  CHECK(config.real("optimizer", "lr") == 1.0);           // an integer is a valid float
  CHECK(config.real("optimizer", "beta2") == 0.95);
  CHECK(config.plugin_path() == std::vector<std::string>{"/a", "/b"});
  const PluginSection &optimizer = config.plugin(ZF_KIND_OPTIMIZER);
  CHECK(optimizer.candidates == std::vector<std::string>{"cpu_adam", "adamw_ref"});
  REQUIRE(optimizer.entries.size() == 1);                 // threads belongs to the plugin
  CHECK(optimizer.entries[0].key == "threads");
  CHECK(optimizer.entries[0].where.str() == "inline.toml:9:11");
  CHECK(config.plugin(ZF_KIND_STAGE).candidates == std::vector<std::string>{"zero0"});
  CHECK(config.where("train", "steps").str() == "inline.toml:5:9");
}
