// The command line a new user meets: every command's --help, the --set / --unset messages,
// run.plugin_path beside the config file, and docs/config.md equal to `zfcore config --keys
// --markdown` (the reference page cannot drift from the schema).
#include "config/config.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string linear_stack() { return test::source_dir() + "/examples/linear_stack.toml"; }

}  // namespace

// Which NaN an operation makes (its sign bit) is chance: the CPU, the kernel, the order of a
// reduction; printf writes one as "-nan". Every message says nan (a fresh machine printed "the loss
// is -nan" where the test expected "the loss is nan").
TEST_CASE("cli: a message says nan for a NaN whatever its sign", "[config][cli]") {
  const double negative = -std::nan(""), positive = std::nan("");
  REQUIRE(std::signbit(negative));
  for (double nan : {negative, positive}) {
    CHECK(format("step %d: the loss is %f; lower optimizer.lr", 2, nan) == "step 2: the loss is nan; lower optimizer.lr");
    CHECK(format("global norm %g)", nan) == "global norm nan)");
    CHECK(format("%.4f -> %e, %G", nan, nan, nan) == "nan -> nan, NAN");
  }
  CHECK(format("%f", -INFINITY) == "-inf");  // an infinity keeps its sign: it means something
  // Text that only contains "-nan" inside a name is not a number.
  CHECK(format("%s", "runs/x-nan.toml, -nanosecond, --set a=-nan_b") == "runs/x-nan.toml, -nanosecond, --set a=-nan_b");
}

TEST_CASE("cli: every command's --help prints its usage and exits 0", "[config][cli]") {
  for (const std::string command : {"run", "validate", "estimate", "plugins", "config", "bench"}) {
    for (const std::string flag : {"--help", "-h"}) {
      auto outcome = test::run_command(test::zfcore() + " " + command + " " + flag);
      INFO(command << " " << flag << "\n" << outcome.output);
      CHECK(outcome.exit_code == 0);
      CHECK_THAT(outcome.output, Catch::StartsWith("usage: zfcore " + command));
    }
  }
  // After a file too, as users type it.
  auto outcome = test::run_command(test::zfcore() + " run " + linear_stack() + " --help");
  CHECK(outcome.exit_code == 0);
  CHECK_THAT(outcome.output, Catch::Contains("--unset table.key"));
  auto top = test::run_command(test::zfcore() + " --help");
  CHECK(top.exit_code == 0);
  CHECK_THAT(top.output, Catch::Contains("config --keys"));
}

TEST_CASE("cli: --set with the value as a separate word says to write key=value", "[config][cli]") {
  auto outcome = test::run_command(test::zfcore() + " run " + linear_stack() + " --set optimizer.lr 0");
  CHECK(outcome.exit_code == 2);
  CHECK_THAT(outcome.output, Catch::Contains("--set optimizer.lr=0"));
  auto bare = test::run_command(test::zfcore() + " validate " + linear_stack() + " --set optimizer.lr");
  CHECK(bare.exit_code == 2);
  CHECK_THAT(bare.output, Catch::Contains("expected --set table.key=value"));
}

TEST_CASE("cli: a boolean written as False suggests false", "[config][cli]") {
  auto outcome = test::run_command(test::zfcore() + " validate " + linear_stack() + " --set data.shuffle=False");
  CHECK(outcome.exit_code != 0);
  CHECK_THAT(outcome.output, Catch::Contains("data.shuffle = \"False\"") && Catch::Contains("write false"));
  CHECK_THROWS_WITH(RunConfig::parse("[data]\nshuffle = \"TRUE\"\n", "b.toml"),
                    Catch::Contains("b.toml:2:11") && Catch::Contains("write true"));
}

TEST_CASE("cli: --unset removes a key of the file before the overrides apply", "[config][cli]") {
  const std::string text = "[train]\nsteps = 7\nmicro_batch = 3\n[selector]\nplugin = \"topk\"\nratio = 0.5\n";
  RunConfig unset = RunConfig::parse(text, "u.toml", {"selector.plugin=all"}, {"selector.ratio", "train.steps"});
  CHECK(unset.integer("train", "steps") == 100);  // the default again
  CHECK(unset.integer("train", "micro_batch") == 3);
  CHECK(unset.plugin(ZF_KIND_SELECTOR).entries.empty());
  CHECK(unset.plugin(ZF_KIND_SELECTOR).candidates == std::vector<std::string>{"all"});
  // Unset then set: the override wins.
  CHECK(RunConfig::parse(text, "u.toml", {"train.steps=9"}, {"train.steps"}).integer("train", "steps") == 9);
  // A key the file does not have is named, not ignored.
  CHECK_THROWS_WITH(RunConfig::parse(text, "u.toml", {}, {"selector.ration"}),
                    Catch::Contains("--unset selector.ration") && Catch::Contains("u.toml has no key 'ration'"));
  CHECK_THROWS_WITH(RunConfig::parse(text, "u.toml", {}, {"steps"}), Catch::Contains("expected --unset table.key"));

  // From the command line, e.g. validate with the key removed.
  std::string dir = test::scratch_dir("cli_unset");
  std::ofstream(dir + "/ab.toml") << "[model]\ntype = \"linear_stack\"\n[data]\ntype = \"random\"\n"
                                     "[train]\nsteps = 2\n[stage]\nplugin = \"zero0\"\nbogus = 1\n";
  auto kept = test::run_command(test::zfcore() + " validate " + dir + "/ab.toml");
  CHECK(kept.exit_code != 0);
  CHECK_THAT(kept.output, Catch::Contains("unknown key 'bogus'"));
  auto removed = test::run_command(test::zfcore() + " validate " + dir + "/ab.toml --unset stage.bogus");
  INFO(removed.output);
  CHECK(removed.exit_code == 0);
}

TEST_CASE("cli: run.plugin_path in a file is relative to the file's directory", "[config][cli]") {
  std::string dir = test::scratch_dir("cli_plugin_path");
  std::ofstream(dir + "/run.toml") << "[run]\nplugin_path = [\"my_plugins\", \"/abs/plugins\"]\n";
  RunConfig config = RunConfig::load(dir + "/run.toml");
  CHECK(config.plugin_path() == std::vector<std::string>{dir + "/my_plugins", "/abs/plugins"});
  // On the command line it stays relative to the working directory.
  CHECK(RunConfig::load(dir + "/run.toml", {"run.plugin_path=here"}).plugin_path() == std::vector<std::string>{"here"});
}

TEST_CASE("cli: zfcore config --keys lists every core key, and docs/config.md is its Markdown", "[config][cli]") {
  auto listing = test::run_command(test::zfcore() + " config --keys");
  REQUIRE(listing.exit_code == 0);
  for (const char *key : {"output_dir", "progress", "beta1", "beta2", "eps", "eval_batches", "dropout",
                          "export_dtype", "plugin_path"})
    CHECK_THAT(listing.output, Catch::Contains(std::string("    ") + key + " "));
  CHECK_THAT(listing.output, Catch::Contains("[optimizer]") && Catch::Contains("default 0.999"));

  auto markdown = test::run_command(test::zfcore() + " config --keys --markdown 2>/dev/null");
  REQUIRE(markdown.exit_code == 0);
  std::string checked_in = test::read_text(test::source_dir() + "/docs/config.md");
  INFO("docs/config.md differs from the schema: regenerate it with build/bin/zfcore config --keys --markdown > "
       "docs/config.md");
  CHECK(markdown.output == checked_in);
}

TEST_CASE("cli: every plugin table is checked before any plugin is created", "[config][cli]") {
  // The stage (created first) fails in create: a bad [selector] key must be reported instead.
  std::string run = test::zfcore() + " run " + linear_stack() + " --set run.output_dir=" +
                    test::scratch_dir("cli_check_first") + " --set run.plugin_path=" + test::binary_dir() +
                    "/tests/abi_plugins --set stage.plugin=faulty --set stage.fail_mode=create --set train.steps=1";
  auto created = test::run_command(run);
  CHECK(created.exit_code != 0);
  CHECK_THAT(created.output, Catch::Contains("injected failure in create"));  // the plugin really fails there
  auto checked = test::run_command(run + " --set selector.bogus=1");
  INFO(checked.output);
  CHECK(checked.exit_code != 0);
  CHECK_THAT(checked.output, Catch::Contains("unknown key 'bogus' in [selector]"));
  CHECK_THAT(checked.output, !Catch::Contains("injected failure in create"));
}

TEST_CASE("cli: a run whose data has fewer sequences than micro_batch says batches wrap the epoch", "[config][cli]") {
  std::string dir = test::scratch_dir("cli_wrap");
  std::ofstream(dir + "/wrap.toml") << "[run]\noutput_dir = \"" << dir << "/out\"\nprogress = \"off\"\n"
                                       "[model]\ntype = \"gpt2\"\nhidden = 32\nlayers = 1\nheads = 2\nvocab = 64\n"
                                       "max_seq = 16\n[data]\ntype = \"synthetic\"\nvocab = 64\nseq_len = 8\n"
                                       "[train]\nsteps = 1\nmicro_batch = 4\n";
  auto few = test::run_command(test::zfcore() + " run " + dir + "/wrap.toml --set data.samples=3");
  INFO(few.output);
  CHECK(few.exit_code == 0);
  CHECK_THAT(few.output, Catch::Contains("3 sequence(s)") && Catch::Contains("train.micro_batch = 4") &&
                             Catch::Contains("wraps around the epoch"));
  auto enough = test::run_command(test::zfcore() + " run " + dir + "/wrap.toml --set data.samples=4");
  CHECK(enough.exit_code == 0);
  CHECK_THAT(enough.output, !Catch::Contains("wraps around"));
}

TEST_CASE("cli: zfcore validate finds a data file that is not there", "[config][cli]") {
  auto missing = test::run_command(test::zfcore() + " validate " + test::source_dir() +
                                   "/examples/quickstart.toml --set data.path=/nonexistent/gpl.txt");
  CHECK(missing.exit_code != 0);
  CHECK_THAT(missing.output, Catch::Contains("data.path: no such file: /nonexistent/gpl.txt"));
  auto present = test::run_command(test::zfcore() + " validate " + test::source_dir() + "/examples/quickstart.toml");
  INFO(present.output);
  CHECK(present.exit_code == 0);
}

TEST_CASE("cli: --set takes a plugin list as a TOML array, as the file does", "[config][cli]") {
  const std::string text = "[optimizer]\nplugin = \"cpu_adam\"\n";
  for (const std::string &list : {"optimizer.plugin=[\"cpu_adam\", \"adamw_ref\"]", "optimizer.plugin=[cpu_adam,adamw_ref]",
                                  "optimizer.plugin=[ cpu_adam , adamw_ref ]"}) {
    INFO(list);
    RunConfig config = RunConfig::parse(text, "p.toml", {list});
    CHECK(config.plugin(ZF_KIND_OPTIMIZER).candidates == std::vector<std::string>{"cpu_adam", "adamw_ref"});
  }
  CHECK(RunConfig::parse(text, "p.toml", {"run.plugin_path=[\"a\", \"b\"]"}).plugin_path() ==
        std::vector<std::string>{"a", "b"});
  CHECK_THROWS_WITH(RunConfig::parse(text, "p.toml", {"optimizer.plugin=[cpu_adam,,adamw_ref]"}),
                    Catch::Contains("--set optimizer.plugin=[cpu_adam,,adamw_ref]: an empty name in the list"));
  CHECK_THROWS_WITH(RunConfig::parse(text, "p.toml", {"train.steps=[1, 2]"}),
                    Catch::Contains("train.steps takes a single value, not a list"));
  // From the command line, as a user types it in a shell.
  auto valid = test::run_command(test::zfcore() + " validate " + linear_stack() +
                                 " --set 'optimizer.plugin=[\"cpu_adam\", \"adamw_ref\"]'");
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
  CHECK_THAT(valid.output, Catch::Contains("optimizer cpu_adam|adamw_ref"));
}

TEST_CASE("cli: a missing plugin's 'available:' list leaves out the files that fail to load", "[config][cli]") {
  // The ABI test's plugins: "good" loads; "garbage" is not a library, "noentry" has no entry point.
  std::string plugins = test::binary_dir() + "/tests/abi_plugins";
  REQUIRE(fs::exists(plugins + "/zf-selector-garbage.so"));
  auto missing = test::run_command(test::zfcore() + " validate " + linear_stack() + " --set run.plugin_path=" + plugins +
                                   " --set selector.plugin=goodd");
  INFO(missing.output);
  CHECK(missing.exit_code == 1);
  const std::string output = missing.output, available = output.substr(output.find("available: "));
  CHECK_THAT(available, Catch::Contains("good") && Catch::Contains("topk_l1"));
  CHECK_THAT(available, !Catch::Contains("garbage") && !Catch::Contains("noentry"));
  CHECK_THAT(available, Catch::Contains("failed to load: zfcore plugins says why"));
  CHECK_THAT(output, Catch::Contains("did you mean 'good'?"));
}

TEST_CASE("cli: the exit codes `zfcore run --help` documents are the ones it returns", "[config][cli]") {
  auto help = test::run_command(test::zfcore() + " run --help");
  REQUIRE(help.exit_code == 0);
  for (const char *line : {"exit codes:", "  0    trained", "  1    an error", "  2    a malformed command line",
                           "129  stopped by SIGHUP, 130 by SIGINT (Ctrl-C), 143 by SIGTERM"})
    CHECK_THAT(help.output, Catch::Contains(line));
  CHECK(test::run_command(test::zfcore() + " run " + linear_stack() + " --frobnicate").exit_code == 2);
  CHECK(test::run_command(test::zfcore() + " run " + linear_stack() + " --set train.stpes=1").exit_code == 1);
  // Ctrl-C: the step ends, a checkpoint is written, 128 + SIGINT (SIGTERM and SIGHUP: test_checkpoint).
  std::string dir = test::scratch_dir("cli_sigint");
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::string log = dir + "/log.txt", output = "run.output_dir=" + dir;
    freopen(log.c_str(), "w", stdout);
    freopen(log.c_str(), "a", stderr);
    execl(test::zfcore().c_str(), "zfcore", "run", linear_stack().c_str(), "--set", "train.steps=1000000", "--set",
          output.c_str(), "--set", "run.progress=off", nullptr);
    _exit(127);
  }
  for (int i = 0; i < 600 && test::read_text(dir + "/steps.jsonl").size() < 10; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(child, SIGINT);
  int status = 0;
  waitpid(child, &status, 0);
  INFO(test::read_text(dir + "/log.txt"));
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 130);
  CHECK(fs::exists(dir + "/checkpoints"));
}

namespace {
// zfcore run with stdout and stderr on a pipe whose reader is gone (`| head` that has read its
// lines, `| tee` ended by Ctrl-C): every write to them fails. SIGINT after its first step when `interrupt`.
int run_into_closed_pipe(const std::string &dir, const std::string &steps, bool interrupt) {
  int ends[2];
  REQUIRE(pipe(ends) == 0);
  close(ends[0]);
  const std::string output = "run.output_dir=" + dir, train = "train.steps=" + steps;
  pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    signal(SIGPIPE, SIG_DFL);  // as a shell starts it
    dup2(ends[1], 1);
    dup2(ends[1], 2);
    execl(test::zfcore().c_str(), "zfcore", "run", linear_stack().c_str(), "--set", train.c_str(), "--set",
          output.c_str(), "--set", "run.progress=on", "--set", "run.log_every=1", nullptr);
    _exit(127);
  }
  close(ends[1]);
  if (interrupt) {
    for (int i = 0; i < 600 && test::read_text(dir + "/steps.jsonl").size() < 10; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    kill(child, SIGINT);
  }
  int status = 0;
  waitpid(child, &status, 0);
  INFO("signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  REQUIRE(WIFEXITED(status));
  return WEXITSTATUS(status);
}
}  // namespace

TEST_CASE("cli: a closed stdout and stderr never stop a run, Ctrl-C still checkpoints, and a run that starts over "
          "says so", "[config][cli]") {
  std::string dir = test::scratch_dir("cli_closed_pipe");
  CHECK(run_into_closed_pipe(dir + "/whole", "5", false) == 0);
  for (const char *file : {"summary.json", "report.html", "checkpoints"}) CHECK(fs::exists(dir + "/whole/" + file));
  CHECK(test::json_field(test::read_text(dir + "/whole/summary.json"), "steps") == "5");
  CHECK(run_into_closed_pipe(dir + "/stopped", "1000000", true) == 130);
  for (const char *file : {"summary.json", "report.html", "checkpoints"}) CHECK(fs::exists(dir + "/stopped/" + file));
  // A run that stopped before its first checkpoint, started again, says that it starts over.
  const std::string run = test::zfcore() + " run " + linear_stack() + " --set run.output_dir=" + dir + "/over" +
                          " --set run.progress=off --set train.steps=2 --set checkpoint.final=false";
  test::Outcome first = test::run_command(run);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, !Catch::Contains("starts over"));
  test::Outcome again = test::run_command(run);
  INFO(again.output);
  CHECK(again.exit_code == 0);
  CHECK_THAT(again.output, Catch::Contains(dir + "/over holds the steps of an earlier run (to step 2) and no checkpoint "
                                                 "this run resumes: it starts over at step 1"));
}

TEST_CASE("cli: summary.json names each plugin by an absolute path", "[config][cli]") {
  // A plugin found through a relative run.plugin_path, from another working directory.
  std::string dir = test::scratch_dir("cli_absolute_plugin");
  auto run = test::run_command("cd " + test::binary_dir() + "/tests && " + test::zfcore() + " run " + linear_stack() +
                               " --set run.plugin_path=abi_plugins --set selector.plugin=good --set train.steps=1 "
                               "--set run.progress=off --set run.output_dir=" + dir);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  nlohmann::json summary = nlohmann::json::parse(test::read_text(dir + "/summary.json"));
  for (const char *kind : {"stage", "offload", "optimizer", "selector"}) {
    std::string path = summary["plugins"][kind]["path"];
    INFO(kind << ": " << path);
    CHECK(fs::path(path).is_absolute());
    CHECK(fs::exists(path));
  }
  CHECK(summary["plugins"]["selector"]["path"] == test::binary_dir() + "/tests/abi_plugins/zf-selector-good.so");
}
