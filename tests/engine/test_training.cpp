// End-to-end runs of the real binary: the quickstart learns; zero0 on 2 MPI ranks computes
// exactly what one process computes for the same global batch; a rank that fails or dies ends
// every rank with an error, quickly.
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <sstream>

using namespace zf;

namespace {

std::string linear_stack() { return test::source_dir() + "/examples/linear_stack.toml"; }

struct Run {
  test::Outcome outcome;
  std::string summary;
};

Run run(const std::string &prefix, const std::string &dir, const std::string &extra) {
  Run r;
  r.outcome = test::run_command(prefix + test::zfcore() + " run " + linear_stack() + " --set run.output_dir=" + dir +
                                " --set run.progress=off " + extra);
  r.summary = test::read_text(dir + "/summary.json");
  return r;
}

}  // namespace

TEST_CASE("the linear_stack workload memorizes its data", "[train]") {
  std::string dir = test::scratch_dir("linear_stack");
  Run r = run("", dir, "--set train.steps=80");
  INFO(r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  double initial = std::stod(test::json_field(r.summary, "initial_loss"));
  double final_loss = std::stod(test::json_field(r.summary, "final_loss"));
  CHECK(initial == Approx(std::log(256.0)).epsilon(0.05));  // untrained: uniform over 256 classes
  CHECK(final_loss < 0.1 * initial);
  CHECK(test::json_field(r.summary, "steps") == "80");
  std::string csv = test::read_text(dir + "/steps.csv");
  CHECK(csv.find("step,loss,step_ms") == 0);
  // One step_ms column: the optimizer-step timer is timer_step_ms.
  std::string header = csv.substr(0, csv.find('\n')) + ",";
  CHECK(header.find(",step_ms,", 0) != std::string::npos);
  CHECK(header.find(",step_ms,", header.find(",step_ms,") + 1) == std::string::npos);
  CHECK(header.find(",timer_step_ms,") != std::string::npos);
  CHECK(test::steps_shorter_than_timers(test::read_text(dir + "/steps.jsonl")) == "");
  CHECK(std::count(r.summary.begin(), r.summary.end(), '\n') <= 1);
  // Where the process's time went outside the steps, in order, as the start line said.
  nlohmann::ordered_json phases = nlohmann::ordered_json::parse(r.summary)["process_seconds"];
  std::vector<std::string> names;
  double total = 0;
  for (const auto &[name, seconds] : phases.items()) {
    names.push_back(name);
    CHECK(seconds.get<double>() >= 0);
    total += seconds.get<double>();
  }
  CHECK(names == std::vector<std::string>{"launch", "device_and_plugins", "model", "buffers", "optimizer", "stage", "resume", "steps", "digest"});
  CHECK(phases["steps"].get<double>() > 0);
  CHECK(total < 600);
  CHECK_THAT(r.outcome.output, Catch::Contains("zfcore: ready to train after "));
}

TEST_CASE("the quickstart's tiny GPT learns the licence text and writes a sample", "[train][slow]") {
  std::string dir = test::scratch_dir("quickstart");
  auto outcome = test::run_command(test::zfcore() + " run " + test::source_dir() + "/examples/quickstart.toml" +
                                   " --set run.output_dir=" + dir + " --set run.progress=off");
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  std::string summary = test::read_text(dir + "/summary.json");
  double initial = std::stod(test::json_field(summary, "initial_loss"));
  double eval_loss = std::stod(test::json_field(summary, "eval_loss"));
  CHECK(initial == Approx(std::log(257.0)).epsilon(0.05));
  CHECK(eval_loss < 0.45 * initial);  // held-out text, well below ln(257)
  CHECK_THAT(outcome.output, Catch::Contains("zfcore: sample (200 tokens") &&
                                 Catch::Contains("The GNU General Public License"));
}

TEST_CASE("zero0 on 2 MPI ranks gives the param_digest of one process with the same global batch", "[train][mpi]") {
  // Clipping on: the global gradient norm must count each element once, however many ranks own it.
  std::string common = "--set train.steps=6 --set train.micro_batch=32 --set run.threads=1 "
                       "--set train.clip_grad_norm=0.5 --set train.lr_schedule=cosine ";
  Run single = run("", test::scratch_dir("zero0_single"), common + "--set train.grad_accum=2");
  // run.rank_timers on the pair: every rank's timers in steps.jsonl, the math unchanged.
  Run pair = run(test::mpirun(2), test::scratch_dir("zero0_pair"),
                 common + "--set train.grad_accum=1 --set run.rank_timers=true");
  INFO(single.outcome.output << "\n" << pair.outcome.output);
  REQUIRE(single.outcome.exit_code == 0);
  REQUIRE(pair.outcome.exit_code == 0);
  CHECK(test::json_field(pair.summary, "world_size") == "2");
  CHECK(test::json_field(pair.summary, "communicator") == "mpi");
  std::string digest = test::json_field(single.summary, "param_digest");
  CHECK(digest.size() == 16);
  CHECK(test::json_field(pair.summary, "param_digest") == digest);
  CHECK(test::json_field(pair.summary, "final_loss") == test::json_field(single.summary, "final_loss"));
  std::string first_single = test::read_text(test::binary_dir() + "/test-scratch/zero0_single/steps.jsonl");
  std::string first_pair = test::read_text(test::binary_dir() + "/test-scratch/zero0_pair/steps.jsonl");
  std::string norm = test::json_field(first_single, "grad_norm");
  CHECK(std::stod(norm) > 0.5);  // clipping was active
  CHECK(test::json_field(first_pair, "grad_norm") == norm);
  // Rank 0's column of rank_step_ms / rank_timers_ms is the step's own record; rank 1 timed its own.
  std::istringstream lines(first_pair);
  int steps_seen = 0;
  for (std::string line; std::getline(lines, line); ++steps_seen) {
    nlohmann::json step = nlohmann::json::parse(line);
    INFO(line);
    REQUIRE(step["rank_step_ms"].size() == 2);
    CHECK(step["rank_step_ms"][0].get<double>() == step["step_ms"].get<double>());
    CHECK(step["rank_step_ms"][1].get<double>() > 0);
    REQUIRE(step["rank_timers_ms"].size() == step["timers_ms"].size());
    for (const auto &[name, ms] : step["timers_ms"].items()) {
      REQUIRE(step["rank_timers_ms"][name].size() == 2);
      CHECK(step["rank_timers_ms"][name][0].get<double>() == ms.get<double>());
    }
    CHECK(step["rank_timers_ms"]["fwd"][1].get<double>() > 0);
  }
  CHECK(steps_seen == 6);
  CHECK(test::json_field(first_single, "rank_step_ms").empty());  // off by default
  // The digest sees the math: another learning rate gives another digest.
  Run other = run("", test::scratch_dir("zero0_other"), common + "--set train.grad_accum=2 --set optimizer.lr=2e-3");
  CHECK(test::json_field(other.summary, "param_digest") != digest);
}

TEST_CASE("a rank that errors or dies mid-step ends every rank with a message, quickly", "[train][mpi]") {
  for (std::string mode : {"error", "exit"}) {
    INFO("fail_mode " << mode);
    auto started = std::chrono::steady_clock::now();
    auto outcome = test::run_command("timeout 120 " + test::mpirun(2) + test::zfcore() + " run " + linear_stack() +
                                     " --set run.output_dir=" + test::scratch_dir("fault_" + mode) +
                                     " --set run.plugin_path=" + test::binary_dir() + "/tests/abi_plugins" +
                                     " --set stage.plugin=faulty --set stage.fail_mode=" + mode +
                                     " --set train.steps=20");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    INFO(outcome.output);
    CHECK(outcome.exit_code != 0);
    CHECK(outcome.exit_code != 124);  // not ended by the timeout
    CHECK(seconds < 60);
    if (mode == "error") CHECK_THAT(outcome.output, Catch::Contains("injected failure on rank 1 at step 3"));
  }
}

TEST_CASE("a fatal signal inside a plugin names the plugin, the entry and the file", "[train]") {
  for (std::string mode : {"segv", "abort"}) {
    INFO("fail_mode " << mode);
    auto outcome = test::run_command("timeout 120 " + test::zfcore() + " run " + linear_stack() +
                                     " --set run.output_dir=" + test::scratch_dir("fatal_" + mode) +
                                     " --set run.plugin_path=" + test::binary_dir() + "/tests/abi_plugins" +
                                     " --set stage.plugin=faulty --set stage.fail_rank=0 --set stage.fail_mode=" +
                                     mode + " --set train.steps=5");
    INFO(outcome.output);
    CHECK(outcome.exit_code != 0);
    CHECK(outcome.exit_code != 124);
    const std::string signal = mode == "segv" ? "SEGV" : "ABRT";
    CHECK_THAT(outcome.output, Catch::Contains("zfcore: fatal signal " + signal +
                                               " in stage plugin 'faulty', entry reduce_gradients, file ") &&
                                   Catch::Contains("/tests/abi_plugins/zf-stage-faulty.so"));
  }
}

TEST_CASE("an export path that cannot be written stops the run before step 1, naming the key", "[train]") {
  std::string dir = test::scratch_dir("unwritable_export");
  // /etc/passwd is a file, so no directory can be made below it (also as root).
  Run r;  // a model with a Hugging Face format (the tiny GPT of the quickstart), so the path is what is refused
  r.outcome = test::run_command(test::zfcore() + " run " + test::source_dir() + "/examples/quickstart.toml" +
                                " --set run.output_dir=" + dir + " --set run.progress=off --set train.steps=50" +
                                " --set checkpoint.export_hf=/etc/passwd/model");
  INFO(r.outcome.output);
  CHECK(r.outcome.exit_code == 1);
  CHECK(r.outcome.output.find("checkpoint.export_hf = \"/etc/passwd/model\": cannot write there") != std::string::npos);
  CHECK(r.outcome.output.find("step 1/") == std::string::npos);  // nothing trained
  CHECK(test::read_text(dir + "/steps.jsonl").empty());
  // So does an export the model has no format for.
  Run linear = run("", dir, "--set train.steps=50 --set checkpoint.export_hf=" + dir + "/hf");
  CHECK(linear.outcome.exit_code == 1);
  CHECK(linear.outcome.output.find("has no Hugging Face format") != std::string::npos);
  CHECK(linear.outcome.output.find("step 1/") == std::string::npos);
}

// train.grad_accum_dtype = "float32" (DeepSpeed's data_types.grad_accum_dtype = "fp32"): a model that
// computes in fp32 trains to the param_digest it has without it (the setting changes nothing there).
// One that computes in bf16 hands the optimizer the fp32 sum of its micro-steps wherever the update
// runs: on the device's tier, in pinned host memory (overlapped with the backward or not), with
// the working parameters in host memory, on disk, split between the device and the host, and
// under zero1, zero2 and zero3: all of them give no offload's param_digest (the same fp32
// gradients and the same optimizer), and bf16 accumulation gives another. ZenFlow takes it too.
TEST_CASE("train.grad_accum_dtype = \"float32\": fp32 runs unchanged, bf16 runs alike on every stage and offload "
          "tier", "[train]") {
  const std::string dir = test::scratch_dir("grad_accum_fp32");
  const std::string gpt = test::source_dir() + "/examples/quickstart.toml";
  const std::string base = " --set train.steps=2 --set train.grad_accum=4 --set train.micro_batch=2 "
                           "--set train.eval_every=0 --set sample.tokens=0 --set run.progress=off "
                           "--set checkpoint.final=false --set model.layers=1 --set model.hidden=64 ";
  auto digest = [&](const std::string &name, const std::string &sets) {
    test::Outcome r = test::run_command(test::zfcore() + " run " + gpt + base + sets + " --set run.output_dir=" + dir +
                                        "/" + name);
    INFO(name << ": " << r.output);
    return r.exit_code == 0 ? test::json_field(test::read_text(dir + "/" + name + "/summary.json"), "param_digest")
                            : "exit " + std::to_string(r.exit_code) + ": " + r.output;
  };
  CHECK(digest("fp32_auto", "--set model.dtype=float32") ==
        digest("fp32_fp32", "--set model.dtype=float32 --set train.grad_accum_dtype=float32"));
  const std::string bf16 = "--set model.dtype=bfloat16 ", wide = bf16 + "--set train.grad_accum_dtype=float32 ";
  const std::string oracle = digest("bf16_fp32_none", wide);
  REQUIRE(oracle.size() == 16);
  CHECK(digest("bf16_auto_none", bf16) != oracle);
  const std::string nvme = "--set offload.plugin=nvme --set offload.path=" + dir + "/nvme ";
  std::filesystem::create_directories(dir + "/nvme");
  const std::vector<std::string> tiers = {
      "--set offload.plugin=cpu_optimizer ", "--set offload.plugin=cpu_optimizer --set offload.overlap=false ",
      "--set offload.plugin=cpu_optimizer --set offload.ratio=0.5 ", "--set offload.plugin=cpu_full ", nvme,
      "--set stage.plugin=zero1 ", "--set stage.plugin=zero2 ", "--set stage.plugin=zero3 ",
      "--set stage.plugin=zero3 --set offload.plugin=cpu_optimizer "};
  for (size_t i = 0; i < tiers.size(); ++i) {
    INFO(tiers[i]);
    CHECK(digest("bf16_fp32_" + std::to_string(i), wide + tiers[i]) == oracle);
  }
  const std::string zenflow = "--set offload.plugin=cpu_optimizer --set zenflow.topk_ratio=0.5 ";
  const std::string selected = digest("bf16_fp32_zenflow", wide + zenflow);
  CHECK(selected.size() == 16);
  CHECK(selected != digest("bf16_auto_zenflow", bf16 + zenflow));
}
