// zenflow.topk_ratio = "auto" on CPU runs, where run.device_memory_limit_gb stands in for the GPU's
// memory. Oracles: no offload (every column fits: AdamW bit for bit), the same run with the chosen
// fraction written out, the limit itself (the model tier's peak stays under it), the uninterrupted
// run (resume mid-interval), and the reference's 0.1 (a CPU run without a limit).
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <string>

using namespace zf;

namespace {

const std::string kWorkload =
    "--set train.steps=8 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam --set optimizer.threads=1 ";
const std::string kZenFlow = kWorkload + "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 "
                                         "--set zenflow.update_interval=3 ";
// linear_stack holds about 4 MiB where it computes before ZenFlow selects, and all of its columns
// need 6 MiB more (one rank); a zero2 rank holds 2.5 MiB and its half needs 3 MiB. These limits
// (GiB) leave room for about half of the columns.
std::string tight_limit(int world) { return world == 1 ? "0.0072" : "0.0042"; }
std::string tight_auto(int world) { return "--set zenflow.topk_ratio=auto --set run.device_memory_limit_gb=" + tight_limit(world) + " "; }

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

}  // namespace

TEST_CASE("ZenFlow topk_ratio auto: AdamW when every column fits, else the largest fraction that fits the limit",
          "[zenflow][mpi]") {
  for (const auto &[stage, world] : std::vector<std::pair<std::string, int>>{{"zero0", 1}, {"zero2", 2}}) {
    INFO(stage << " on " << world << " ranks");
    test::StageRun none = test::run_stage_ok("zfa_none_" + stage, stage, world, kWorkload);
    test::StageRun ample = test::run_stage_ok("zfa_ample_" + stage, stage, world,
                                              kZenFlow + "--set run.device_memory_limit_gb=100");
    CHECK(digest_of(ample) == digest_of(none));
    CHECK(test::json_number(ample.summary, "zenflow_topk_ratio") == 1);
    CHECK(test::json_number(ample.summary, "host_update_bytes") == 0);  // the CPU had nothing to update
    CHECK(ample.outcome.output.find("zenflow.topk_ratio = auto chose 1: every column") != std::string::npos);

    test::StageRun tight = test::run_stage_ok("zfa_tight_" + stage, stage, world, kZenFlow + tight_auto(world));
    const double topk = test::json_number(tight.summary, "zenflow_topk_ratio");
    CHECK(topk > 0.1);
    CHECK(topk < 0.9);
    CHECK(test::json_number(tight.summary, "selected_column_fraction") >= topk);
    CHECK(test::json_number(tight.summary, "selected_column_fraction") < topk + 0.02);
    CHECK(test::json_number(tight.summary, "host_update_bytes") > 0);
    // It points at partial offload, which the same memory holds more of.
    CHECK(tight.outcome.output.find("without [zenflow], offload.ratio = \"auto\" would keep about") !=
          std::string::npos);
    CHECK(ample.outcome.output.find("without [zenflow]") == std::string::npos);
    // The compact copies and every other buffer where the model computes stay under the limit.
    CHECK(nlohmann::json::parse(tight.summary)["peak_memory_bytes"]["host"].get<double>() <
          std::stod(tight_limit(world)) * double(1ull << 30));
    // The fraction it chose, written out, runs the same steps.
    test::StageRun explicit_topk =
        test::run_stage_ok("zfa_explicit_" + stage, stage, world,
                           kZenFlow + "--set zenflow.topk_ratio=" + test::json_field(tight.summary, "zenflow_topk_ratio"));
    CHECK(digest_of(explicit_topk) == digest_of(tight));
  }
}

TEST_CASE("ZenFlow topk_ratio auto on a CPU run without a limit is the reference's 0.1", "[zenflow]") {
  test::StageRun automatic = test::run_stage_ok("zfa_default", "zero0", 1, kZenFlow);
  test::StageRun reference = test::run_stage_ok("zfa_reference", "zero0", 1, kZenFlow + "--set zenflow.topk_ratio=0.1");
  CHECK(digest_of(automatic) == digest_of(reference));
  CHECK(test::json_number(automatic.summary, "zenflow_topk_ratio") == 0.1);
  CHECK(automatic.outcome.output.find("a CPU run without run.device_memory_limit_gb") != std::string::npos);
}

TEST_CASE("a ZenFlow run with topk_ratio auto resumed mid-interval keeps its fraction and repeats the run",
          "[zenflow][mpi]") {
  // The checkpoint at step 4 holds the chosen fraction. The resumed run is given room for every
  // column: it must not choose again.
  const std::string base = kZenFlow + "--set checkpoint.every=4 --set zenflow.topk_ratio=auto ";
  test::StageRun whole = test::run_stage_ok("zfa_whole", "zero2", 2, base + tight_auto(2));
  test::ResumedRun r = test::run_resumed("zfa_resume", "zero2", 2, base + tight_auto(2), 5, 8,
                                         test::default_stage_config(), 4, "--set run.device_memory_limit_gb=100");
  test::require_resumed(r);
  const test::StageRun &resumed = r.resumed;
  CHECK(resumed.outcome.output.find("zfcore: resumed from") != std::string::npos);
  CHECK(resumed.outcome.output.find("auto chose") == std::string::npos);
  CHECK(digest_of(resumed) == digest_of(whole));
  CHECK(test::json_field(resumed.summary, "zenflow_topk_ratio") == test::json_field(whole.summary, "zenflow_topk_ratio"));
}

TEST_CASE("a ZenFlow checkpoint of a fixed topk_ratio resumes under topk_ratio auto", "[zenflow]") {
  // The checkpoint holds no choice (zenflow.topk_ratio is optional state): auto chooses at the
  // next selection instead of refusing the checkpoint.
  test::ResumedRun r = test::run_resumed("zfa_from_fixed", "zero0", 1,
                                         kZenFlow + "--set checkpoint.every=4 --set zenflow.topk_ratio=0.1", 4, 8,
                                         test::default_stage_config(), 4, "--set zenflow.topk_ratio=auto");
  INFO(r.first.output << "\n" << r.resumed.outcome.output);
  CHECK(r.first.exit_code == 0);
  CHECK(r.resumed.outcome.exit_code == 0);
  CHECK(r.resumed.outcome.output.find("zfcore: resumed from") != std::string::npos);
  CHECK(r.resumed.outcome.output.find("has no optimizer state") == std::string::npos);
}
