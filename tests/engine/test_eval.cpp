// zfcore eval. Oracle: the evaluation a training run logs (train.eval_every) at a step, on a
// separate file (data.eval_path), equals what `zfcore eval` computes from that step's checkpoint,
// on one rank and on two, whatever stage wrote the checkpoint.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <sstream>

using namespace zf;

namespace {

// The "eval_loss" a run logged at `step` in steps.jsonl ("" when none).
std::string logged_eval_loss(const std::string &output_dir, int step) {
  std::istringstream lines(test::read_text(output_dir + "/steps.jsonl"));
  std::string line, prefix = "{\"step\":" + std::to_string(step) + ",";
  while (std::getline(lines, line))
    if (line.rfind(prefix, 0) == 0) return test::json_field(line, "eval_loss");
  return "";
}

void write_corpus(const std::string &path, int lines, int salt) {
  std::ofstream text(path);
  for (int i = 0; i < lines; ++i)
    text << "Line " << i << ": the quick brown fox jumps over " << (i * 7 + salt) % 13 << " lazy dogs.\n";
}

}  // namespace

TEST_CASE("zfcore eval on a checkpoint gives the eval loss the run logged at that step", "[eval][mpi]") {
  std::string data = test::scratch_dir("eval_data");
  write_corpus(data + "/train.txt", 60, 0);
  write_corpus(data + "/held_out.txt", 20, 5);
  std::string config = test::source_dir() + "/examples/quickstart.toml --set run.progress=off" +
                       " --set model.hidden=32 --set model.layers=2 --set model.heads=2 --set model.max_seq=32" +
                       " --set data.seq_len=32 --set data.path=" + data + "/train.txt --set data.eval_fraction=0" +
                       " --set data.eval_path=" + data + "/held_out.txt --set train.micro_batch=4" +
                       " --set train.eval_batches=3 --set sample.tokens=0 ";
  // zero2 on two ranks: the checkpoint holds the master in two shards.
  std::string dir = test::scratch_dir("eval_run");
  auto trained = test::run_command("timeout 300 " + test::mpirun(2) + test::zfcore() + " run " + config +
                                   "--set stage.plugin=zero2 --set train.steps=8 --set train.eval_every=4 " +
                                   "--set checkpoint.every=4 --set checkpoint.keep=2 --set run.output_dir=" + dir);
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  const std::string at4 = logged_eval_loss(dir, 4), at8 = logged_eval_loss(dir, 8);
  REQUIRE(!at4.empty());
  REQUIRE(!at8.empty());

  auto eval = [&](const std::string &prefix, const std::string &extra) {
    auto outcome = test::run_command("timeout 300 " + prefix + test::zfcore() + " eval " + config +
                                     "--set run.output_dir=" + dir + " --json " + extra);
    INFO(outcome.output);
    REQUIRE(outcome.exit_code == 0);
    return outcome.output.substr(outcome.output.rfind("{\"loss\""));
  };
  // checkpoint.resume = auto: the run's newest checkpoint, step 8.
  std::string newest = eval("", "");
  CHECK(test::json_field(newest, "step") == "8");
  CHECK(std::stod(test::json_field(newest, "loss")) == Approx(std::stod(at8)).epsilon(1e-8));
  CHECK(std::stod(test::json_field(newest, "perplexity")) == Approx(std::exp(std::stod(at8))).epsilon(1e-7));
  CHECK(test::json_field(newest, "micro_batches") == "3");
  CHECK(std::stod(test::json_field(newest, "tokens")) > 0);
  // A checkpoint named, on one rank and on two (the ranks share the micro-batches).
  std::string step4 = " --set checkpoint.resume=" + dir + "/checkpoints/step-00000004";
  for (const std::string &prefix : {std::string(), test::mpirun(2)}) {
    std::string named = eval(prefix, step4);
    CHECK(test::json_field(named, "step") == "4");
    CHECK(std::stod(test::json_field(named, "loss")) == Approx(std::stod(at4)).epsilon(1e-8));
  }
  // The human line.
  auto line = test::run_command(test::zfcore() + " eval " + config + "--set run.output_dir=" + dir + step4);
  INFO(line.output);
  REQUIRE(line.exit_code == 0);
  CHECK_THAT(line.output, Catch::Contains("zfcore eval: loss ") && Catch::Contains("perplexity") &&
                              Catch::Contains("(step 4)"));
}

TEST_CASE("zfcore eval says what held-out data it needs, and eval_path excludes eval_fraction", "[eval]") {
  std::string quickstart = test::source_dir() + "/examples/quickstart.toml --set run.progress=off ";
  auto none = test::run_command(test::zfcore() + " eval " + quickstart + "--set data.eval_fraction=0");
  CHECK(none.exit_code == 1);
  CHECK_THAT(none.output, Catch::Contains("zfcore eval needs held-out data: set data.eval_path"));
  auto both = test::run_command(test::zfcore() + " eval " + quickstart + "--set data.eval_path=" +
                                test::source_dir() + "/README.md");
  CHECK(both.exit_code == 1);
  CHECK_THAT(both.output, Catch::Contains("data.eval_path and data.eval_fraction both choose the held-out data"));
  auto help = test::run_command(test::zfcore() + " eval --help");
  CHECK(help.exit_code == 0);
  CHECK_THAT(help.output, Catch::Contains("usage: zfcore eval FILE"));
}
