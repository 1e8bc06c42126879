// End-to-end GPU runs of the real binary: the same tiny GPT (and Qwen2) on the CPU (adamw_ref) and on
// the GPU (gpu_adam) follow the same loss curve in fp32; a bf16 run learns, and its step times hold the
// GPU work of their steps; the summary reports GPU memory from the caching allocator beside the
// ledger; bad input is a clear error.
#include "gpu_skip.hpp"

#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

using namespace zf;

namespace {

std::string tiny_gpt() { return test::source_dir() + "/tests/gpu/tiny_gpt.toml"; }

struct Run {
  test::Outcome outcome;
  std::string summary;
  std::string steps;  // steps.jsonl
  std::vector<double> losses;
};

Run run(const std::string &name, const std::string &extra) {
  std::string dir = test::scratch_dir(name);
  Run r;
  r.outcome = test::run_command(test::zfcore() + " run " + tiny_gpt() + " --set run.output_dir=" + dir +
                                " --set run.progress=off " + extra);
  r.summary = test::read_text(dir + "/summary.json");
  r.steps = test::read_text(dir + "/steps.jsonl");
  std::istringstream lines(r.steps);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty()) r.losses.push_back(std::stod(test::json_field(line, "loss")));
  return r;
}

}  // namespace

TEST_CASE("a tiny GPT and a tiny Qwen2 compute the same losses on the GPU as on the CPU", "[gpu][train]") {
  test::require_gpus(1);
  // The Qwen2 shape: RMSNorm (one fused kernel each way on the GPU, ATen's ops on the CPU), rotary
  // embeddings, grouped-query attention, q/k/v biases.
  const std::vector<std::pair<std::string, std::string>> models = {
      {"gpt2", ""},
      {"qwen2", " --set model.type=qwen2 --set model.heads=4 --set model.kv_heads=2 --set model.intermediate=256"}};
  for (const auto &[model, shape] : models) {
    Run cpu = run("gpu_vs_cpu_cpu_" + model, "--set run.threads=1" + shape);
    Run gpu = run("gpu_vs_cpu_gpu_" + model, "--set run.device=cuda --set optimizer.plugin=gpu_adam" + shape);
    INFO(model << "\n" << cpu.outcome.output << "\n" << gpu.outcome.output);
    REQUIRE(cpu.outcome.exit_code == 0);
    REQUIRE(gpu.outcome.exit_code == 0);
    REQUIRE(cpu.losses.size() == 12);
    REQUIRE(gpu.losses.size() == cpu.losses.size());
    for (size_t i = 0; i < cpu.losses.size(); ++i) {
      INFO("step " << i + 1 << ": cpu " << cpu.losses[i] << ", gpu " << gpu.losses[i]);
      CHECK(std::abs(gpu.losses[i] - cpu.losses[i]) < 2e-3 * std::abs(cpu.losses[i]));
    }
    CHECK(cpu.losses.back() < cpu.losses.front());
    CHECK_THAT(gpu.summary, Catch::Contains("\"gpu_memory_bytes\""));
    double allocated = std::stod(test::json_field(gpu.summary, "allocated_peak"));
    double ledger = std::stod(test::json_field(gpu.summary, "ledger_device_peak"));
    CHECK(ledger > 0);
    CHECK(allocated >= ledger);  // the allocator holds the ledger's blocks and the step's tensors
  }
}

TEST_CASE("a bf16 GPU run with gpu_adam learns and writes bf16 params in the optimizer pass", "[gpu][train]") {
  test::require_gpus(1);
  Run r = run("gpu_bf16", "--set run.device=cuda --set optimizer.plugin=gpu_adam --set model.dtype=bfloat16 "
                          "--set train.steps=30 --set train.clip_grad_norm=0");
  INFO(r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  REQUIRE(r.losses.size() == 30);
  CHECK(r.losses.back() < r.losses.front() - 0.1);
  CHECK_THAT(r.outcome.output, Catch::Contains("BFloat16") && Catch::Contains("gpu peak"));
  // A step's time holds the GPU work it queued: its kernels on the compute stream (timers fwd,
  // bwd, step, one after another) ran inside it, the update's last ones included.
  CHECK(test::steps_shorter_than_timers(r.steps) == "");
}

TEST_CASE("GPU runs refuse a CPU optimizer with a message", "[gpu][train]") {
  test::require_gpus(1);
  Run cpu_optimizer = run("gpu_cpu_optimizer", "--set run.device=cuda");  // adamw_ref on GPU master weights
  CHECK(cpu_optimizer.outcome.exit_code != 0);
  CHECK_THAT(cpu_optimizer.outcome.output, Catch::Contains("gpu_adam"));
}
