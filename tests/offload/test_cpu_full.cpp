// cpu_full computes what no offload computes, with the working parameters in host memory. Oracle:
// the same stage, world size and batch with offload.plugin = "none" and the same CPU optimizer:
// a block copied from host memory before it computes holds the bits it would hold on the device,
// and the optimizer writes the same bits into host memory that it writes into the device buffer.
// A CPU run treats host memory as the device, so every block copy, the release after use and the
// in-place update run here; the ledger shows where the parameters are.
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <string>

using namespace zf;
using test::run_stage_ok;

namespace {

const std::string kWorkload =
    "--set train.steps=4 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam --set optimizer.threads=1 "
    "--set train.clip_grad_norm=0.5 ";
const std::string kFull = "--set offload.plugin=cpu_full --set offload.bucket_size=5000 ";

std::string stage_buckets(const std::string &stage) {
  return stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "";
}

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }


uint64_t number(const std::string &json, const std::string &key) {
  std::string value = test::json_field(json, key);
  return value.empty() ? 0 : std::stoull(value);
}

// The quickstart's GPT (tied embedding: the last block reads the first block's weights) made small.
const std::string kGpt = "--set train.steps=4 --set train.micro_batch=4 --set data.seq_len=32 --set train.eval_every=0 "
                         "--set sample.tokens=0 --set run.log_every=1 --set optimizer.plugin=cpu_adam "
                         "--set optimizer.threads=1 --set model.dtype=bfloat16 ";

std::string quickstart() { return test::source_dir() + "/examples/quickstart.toml"; }

}  // namespace

TEST_CASE("cpu_full gives no offload's param_digest under zero0-zero3 on 2 ranks, in bf16 and fp32",
          "[offload][cpu_full][mpi]") {
  for (const std::string &dtype : {"bfloat16", "float32"}) {
    for (const std::string &stage : {"zero0", "zero1", "zero2", "zero3"}) {
      if (dtype == "float32" && (stage == "zero0" || stage == "zero2")) continue;  // bf16 covers them
      std::string base = kWorkload + stage_buckets(stage) + "--set model.dtype=" + dtype + " ";
      test::StageRun none = run_stage_ok("full_none_" + stage + dtype, stage, 2, base);
      test::StageRun full = run_stage_ok("full_cpu_" + stage + dtype, stage, 2, base + kFull);
      INFO(stage << " in " << dtype);
      CHECK(digest_of(full).size() == 16);
      CHECK(digest_of(full) == digest_of(none));
      CHECK(test::json_field(full.summary, "final_loss") == test::json_field(none.summary, "final_loss"));
    }
  }
}

TEST_CASE("cpu_full keeps the parameters in pinned memory and a block on the device only while it computes",
          "[offload][cpu_full]") {
  const std::string base = kWorkload + "--set model.dtype=bfloat16 ";
  test::StageRun none = run_stage_ok("full_mem_none", "zero0", 1, base);
  test::StageRun full = run_stage_ok("full_mem", "zero0", 1, base + kFull);
  CHECK(digest_of(full) == digest_of(none));
  // linear_stack: 4 blocks of 256 x 256 weights + 256 biases, bf16 (2 bytes), 64-element aligned.
  const uint64_t block = (256 * 256 + 256) * 2, model = 4 * block;
  auto ledger = [&](const std::string &tag) { return test::ledger_bytes(full.summary, "memory_bytes", tag); };
  CHECK(ledger("pinned.params") == model);   // the working parameters, in host memory
  CHECK(ledger("host.params") == 0);          // none whole where the model computes
  CHECK(ledger("host.params.gathered") == 0);  // every block released after use...
  CHECK(test::ledger_bytes(full.summary, "memory_peak_bytes", "host.params.gathered") == block);  // one at a time
  CHECK(ledger("pinned.params.offload") == 0);  // the optimizer writes them in place
  CHECK(number(full.summary, "offload_bytes_up") == 0);      // so nothing goes up after the step
  // Where the model computes: the gradients and at most a block or two, not the parameters.
  const uint64_t device_peak = number(full.summary, "host");
  CHECK(device_peak <= model + 2 * block);
  CHECK(device_peak < number(none.summary, "host"));
  CHECK(number(full.summary, "planned_pinned_bytes") == number(full.summary, "pinned"));
  CHECK(device_peak <= number(full.summary, "planned_host_bytes"));

  // zfcore estimate's cpu_full table predicts the pinned bytes of the run.
  test::Outcome estimate = test::run_command(test::zfcore() + " estimate --bytes " + test::default_stage_config() +
                                             " --set offload.plugin=cpu_full --set optimizer.plugin=cpu_adam "
                                             "--set model.dtype=bfloat16");
  INFO(estimate.output);
  REQUIRE(estimate.exit_code == 0);
  CHECK_THAT(test::chosen_estimate_row(estimate.output, "offload cpu_full"),
             Catch::Contains(" " + std::to_string(number(full.summary, "planned_pinned_bytes")) + " "));
}

TEST_CASE("cpu_full on a GPT with a tied embedding and gradient accumulation gives no offload's bits, and resumes",
          "[offload][cpu_full]") {
  const std::string accum = kGpt + "--set train.grad_accum=2 --set train.clip_grad_norm=1.0 ";
  test::StageRun none = run_stage_ok("full_gpt_none", "zero0", 1, accum, quickstart());
  test::StageRun full = run_stage_ok("full_gpt", "zero0", 1, accum + kFull, quickstart());
  CHECK(digest_of(full) == digest_of(none));
  CHECK(test::read_text(full.dir + "/steps.jsonl").size() > 0);

  test::StageRun whole = run_stage_ok("full_gpt_whole", "zero3", 1, kGpt + kFull + "--set train.steps=6", quickstart());
  test::ResumedRun r = test::run_resumed("full_gpt_resume", "zero3", 1, kGpt + kFull + "--set checkpoint.every=2 ",
                                         4, 6, quickstart());
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(whole));
}

TEST_CASE("cpu_full with ZenFlow is refused before the first step, saying what works", "[offload][cpu_full]") {
  test::StageRun r = test::run_stage(
      "full_zenflow", "zero0", 1, kWorkload + kFull + "--set zenflow.topk_ratio=0.1 --set zenflow.update_interval=2");
  INFO(r.outcome.output);
  CHECK(r.outcome.exit_code != 0);
  CHECK_THAT(r.outcome.output, Catch::Contains("'cpu_full' keeps the working parameters in host memory"));
  CHECK_THAT(r.outcome.output, Catch::Contains("cpu_optimizer"));
  CHECK(r.outcome.output.find("step 1") == std::string::npos);
}
