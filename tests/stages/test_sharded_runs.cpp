// Sharded runs end to end: a rank killed mid-run ends every rank; resuming a sharded run from its
// per-rank checkpoint files is bit-exact; the consolidated Hugging Face export of a 2-rank zero3
// run seeds a 3-rank run.
#include "stage_runs.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string linear_stack() { return test::source_dir() + "/examples/linear_stack.toml"; }

}  // namespace

TEST_CASE("a rank killed in the middle of a zero2 or zero3 run ends every rank, quickly", "[stage][mpi]") {
  for (std::string stage : {"zero2", "zero3"}) {
    INFO(stage);
    std::string args = " run " + linear_stack() + " --set run.progress=off --set train.steps=1000000 " +
                       "--set stage.plugin=" + stage + " --set run.output_dir=" + test::scratch_dir("kill_" + stage);
    if (stage == "zero3") args += " --set stage.param_persistence_threshold=1000";  // gather every block
    // MPMD launch: rank 1 is killed (SIGKILL, no chance to say goodbye) 10 s after it starts.
    std::string launch = "timeout 120 " + test::mpirun(1) + test::zfcore() + args + " : -np 1 timeout -s KILL 10 " +
                         test::zfcore() + args;
    auto started = std::chrono::steady_clock::now();
    auto outcome = test::run_command(launch);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(outcome.output);
    CHECK(outcome.exit_code != 0);
    CHECK(outcome.exit_code != 124);  // not ended by the outer timeout
    CHECK(seconds < 60);
    CHECK(test::step_losses(test::binary_dir() + "/test-scratch/kill_" + stage).size() >= 1);  // it was training
  }
}

TEST_CASE("a sharded run resumes from its per-rank checkpoint bit for bit", "[stage][mpi][checkpoint]") {
  struct Case {
    std::string stage;
    int world;
  };
  for (const Case &c : {Case{"zero3", 2}, Case{"zero2", 3}}) {
    INFO(c.stage << " on " << c.world << " ranks");
    std::string common = "--set train.steps=10 --set train.micro_batch=32 --set train.lr_schedule=cosine "
                         "--set train.clip_grad_norm=0.5 --set checkpoint.keep=3 ";
    if (c.stage == "zero3") common += "--set stage.param_persistence_threshold=1000 ";
    test::StageRun full = test::run_stage("resume_full", c.stage, c.world, common + "--set checkpoint.every=5");
    INFO(full.outcome.output);
    REQUIRE(full.outcome.exit_code == 0);
    std::string step5 = full.dir + "/checkpoints/step-00000005";
    for (int rank = 0; rank < c.world; ++rank)
      CHECK(fs::exists(step5 + "/rank-0000" + std::to_string(rank) + ".safetensors"));
    test::StageRun resumed = test::run_stage("resume_part", c.stage, c.world,
                                             common + "--set checkpoint.resume=" + step5);
    INFO(resumed.outcome.output);
    REQUIRE(resumed.outcome.exit_code == 0);
    CHECK(test::json_field(resumed.summary, "first_step") == "6");
    CHECK(test::json_field(resumed.summary, "param_digest") == test::json_field(full.summary, "param_digest"));
    auto a = test::step_losses(full.dir), b = test::step_losses(resumed.dir);
    for (int step = 6; step <= 10; ++step) CHECK(b[step] == a[step]);
    // Another world size with another global batch is told how to continue (test_reshard.cpp's cases
    // resume on other layouts).
    test::StageRun other = test::run_stage("resume_other", c.stage, c.world + 1,
                                           common + "--set checkpoint.resume=" + step5);
    CHECK(other.outcome.exit_code != 0);
    CHECK_THAT(other.outcome.output, Catch::Contains("checkpoint.resume_batch"));
  }
}

TEST_CASE("the export of a 2-rank zero3 run seeds a 3-rank run", "[stage][mpi][checkpoint]") {
  std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  std::string common = "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.plugin=adamw_ref "
                       "--set stage.param_persistence_threshold=1000 ";
  std::string exported = test::scratch_dir("zero3_export_hf");
  test::StageRun a = test::run_stage("zero3_export", "zero3", 2,
                                     common + "--set train.steps=40 --set checkpoint.export_hf=" + exported, quickstart);
  INFO(a.outcome.output);
  REQUIRE(a.outcome.exit_code == 0);
  REQUIRE(fs::exists(exported + "/model.safetensors"));
  REQUIRE(fs::exists(exported + "/config.json"));
  // Seeded from the export: 3 ranks x 16 samples under zero3, and the oracle, one zero0 process
  // with 3 micro-steps of 16 (the same 48 samples). Their first losses agree, and lie far below
  // an untrained model's ln(257).
  std::string seeded = common + "--set train.steps=1 --set model.init_from=" + exported + " ";
  test::StageRun b = test::run_stage("zero3_seeded", "zero3", 3, seeded, quickstart);
  INFO(b.outcome.output);
  REQUIRE(b.outcome.exit_code == 0);
  test::StageRun oracle = test::run_stage("zero3_seeded_oracle", "zero0", 1,
                                          "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.plugin=adamw_ref "
                                          "--set train.grad_accum=3 " + std::string("--set train.steps=1 --set model.init_from=") + exported,
                                          quickstart);
  INFO(oracle.outcome.output);
  REQUIRE(oracle.outcome.exit_code == 0);
  double seeded_loss = std::stod(test::json_field(b.summary, "initial_loss"));
  double oracle_loss = std::stod(test::json_field(oracle.summary, "initial_loss"));
  CHECK(seeded_loss == Approx(oracle_loss).epsilon(1e-6));
  CHECK(seeded_loss < 0.8 * std::log(257.0));
}

TEST_CASE("a bf16 zero3 run on 2 ranks exports its sharded fp32 master, as zero0 does", "[stage][mpi][checkpoint]") {
  // zero0 and zero3 train the same bits (test_equivalence); zero0 holds the whole master on every
  // rank, zero3 half of it: the fp32 export gathers it to rank 0, and the files are equal.
  std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  std::string common = "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.plugin=adamw_ref "
                       "--set model.dtype=bfloat16 --set train.steps=3 --set checkpoint.export_dtype=float32 ";
  std::map<std::string, std::string> weights;
  for (const std::string &stage : {"zero0", "zero3"}) {
    std::string exported = test::scratch_dir("fp32_export_" + stage);
    std::string extra = stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "";
    test::StageRun r = test::run_stage("fp32_export_run_" + stage, stage, 2,
                                       common + extra + "--set checkpoint.export_hf=" + exported, quickstart);
    INFO(r.outcome.output);
    REQUIRE(r.outcome.exit_code == 0);
    weights[stage] = test::read_text(exported + "/model.safetensors");
  }
  CHECK(weights["zero3"].find("\"F32\"") != std::string::npos);
  CHECK(weights["zero3"].size() > 100000);
  CHECK(weights["zero3"] == weights["zero0"]);
}

// Blocks gathered per micro-step under zero3 (2 ranks) and cpu_full (1 rank), from summary.json's
// param_gathers: a tied embedding (GPT-2's wte, read by the head too) once, as FSDP2 keeps its root
// gathered; a layer once for its forward and once for its backward; the resident head only when
// first read after an update. Holding the embedding longer changes no result: the digest is zero2's
// (which reduces each micro-step as zero3 does, so sums in the same order).
TEST_CASE("a tied embedding is gathered once per micro-step and a layer once per forward and once per backward",
          "[stage][mpi]") {
  const std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  const int steps = 3, accum = 2;
  const std::string common = "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.plugin=adamw_ref "
                             "--set train.steps=" + std::to_string(steps) + " --set train.grad_accum=" +
                             std::to_string(accum) + " ";
  test::StageRun reference = test::run_stage_ok("tied_zero2", "zero2", 2, common, quickstart);
  struct Case {
    std::string stage, extra;
    int world;
  };
  for (const Case &c : {Case{"zero3", "--set stage.param_persistence_threshold=1000", 2},
                        Case{"zero0", "--set offload.plugin=cpu_full", 1}}) {
    INFO(c.stage << " " << c.extra);
    test::StageRun run = test::run_stage_ok("tied_" + c.stage, c.stage, c.world, common + c.extra, quickstart);
    const std::string gathers = run.summary.substr(run.summary.find("\"param_gathers\":"));
    const int micro_steps = steps * accum;
    CHECK(test::json_field(gathers, "embeddings") == std::to_string(micro_steps));
    for (int layer = 0; layer < 4; ++layer)
      CHECK(test::json_field(gathers, "transformer.h." + std::to_string(layer)) == std::to_string(2 * micro_steps));
    if (c.world == 1) {
      CHECK(test::json_field(gathers, "head") == std::to_string(2 * micro_steps));  // cpu_full keeps nothing resident
      continue;
    }
    // Resident: at the start, then at its first use after each step's update (not after the last).
    CHECK(test::json_field(gathers, "head") == std::to_string(steps));
    CHECK(test::json_field(run.summary, "param_digest") == test::json_field(reference.summary, "param_digest"));
  }
}
