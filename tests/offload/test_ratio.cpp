// offload.ratio (partial offload, DeepSpeed's ZeRO-Offload++): the first (1 - ratio) of each rank's
// optimizer shard is updated where the model computes, the rest by the offload tier, beside it.
// Oracle: the update is elementwise, so any split computes what no offload computes: the same
// param_digest as offload.plugin = "none" with the same CPU optimizer, under zero0-zero3, on 1 and
// 2 ranks, in fp32 and bf16, with the state in memory or on disk; a resumed run ends where the
// uninterrupted one ends.
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>
#include <vector>

using namespace zf;

namespace {

const std::string kWorkload = "--set train.steps=4 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam "
                              "--set optimizer.threads=1 --set train.clip_grad_norm=0.5 ";
// Buckets much smaller than a layer, so that the backward hands over many of them.
const std::string kOffload = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";

std::string ratio(const char *value) { return kOffload + "--set offload.ratio=" + value + " "; }

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

test::StageRun run_ok(const std::string &name, const std::string &stage, int world, const std::string &args) {
  test::StageRun r = test::run_stage(name, stage, world, args);
  INFO(name << "\n" << r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  return r;
}

}  // namespace

TEST_CASE("offload.ratio 0 and 0.3 give no offload's param_digest under zero0-zero3 on 2 ranks", "[offload][ratio][mpi]") {
  for (const std::string stage : {"zero0", "zero1", "zero2", "zero3"}) {
    const std::string base =
        kWorkload + (stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : std::string());
    test::StageRun none = run_ok("ratio_none_" + stage, stage, 2, base);
    for (const char *share : {"0", "0.3"}) {
      test::StageRun split = run_ok(std::string("ratio_") + share + "_" + stage, stage, 2, base + ratio(share));
      INFO(stage << ", offload.ratio = " << share << "\n" << split.outcome.output);
      CHECK(digest_of(split).size() == 16);
      CHECK(digest_of(split) == digest_of(none));
      CHECK(test::json_field(split.summary, "final_loss") == test::json_field(none.summary, "final_loss"));
    }
  }
}

TEST_CASE("offload.ratio on 1 rank with gradient accumulation, in bf16 and with the state on disk, gives no "
          "offload's bits",
          "[offload][ratio]") {
  const std::string accum = kWorkload + "--set train.grad_accum=2 ";
  CHECK(digest_of(run_ok("ratio1_split", "zero0", 1, accum + ratio("0.5"))) ==
        digest_of(run_ok("ratio1_none", "zero0", 1, accum)));
  const std::string bf16 = kWorkload + "--set model.dtype=bfloat16 ";
  CHECK(digest_of(run_ok("ratio_bf16_split", "zero2", 2, bf16 + ratio("0.3"))) ==
        digest_of(run_ok("ratio_bf16_none", "zero2", 2, bf16)));
  const std::string disk = kWorkload + "--set offload.plugin=nvme --set offload.bucket_size=5000 "
                                       "--set offload.path=" + test::scratch_dir("ratio_nvme_files") + " ";
  test::StageRun on_disk = run_ok("ratio_nvme", "zero0", 1, disk + "--set offload.ratio=0.4");
  CHECK(digest_of(on_disk) == digest_of(run_ok("ratio_nvme_none", "zero0", 1, kWorkload)));
}

TEST_CASE("an offload.ratio run resumed mid-run repeats the uninterrupted run bit for bit", "[offload][ratio]") {
  const std::string base = kWorkload + ratio("0.3") + "--set checkpoint.every=2 ";
  test::StageRun whole = run_ok("ratio_whole", "zero1", 1, base + "--set train.steps=6");
  test::ResumedRun r = test::run_resumed("ratio_resume", "zero1", 1, base, 4, 6);  // checkpoints at 2 and 4
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(whole));
}

TEST_CASE("the memory plan and zfcore estimate show the device part of offload.ratio, and equal the ledger", "[offload][ratio]") {
  test::StageRun split = run_ok("ratio_plan", "zero0", 1, kWorkload + ratio("0.25"));
  CHECK(split.outcome.output.find("master (device part)") != std::string::npos);
  // On a CPU run the model's tier is host memory: the device part's master and moments are there,
  // a quarter's worth of the master's elements beside the whole host master (pinned, as planned).
  const std::string part = test::json_field(split.summary, "host.master (device part)");
  const std::string moment = test::json_field(split.summary, "host.cpu_adam.exp_avg (device part)");
  const std::string master = test::json_field(split.summary, "pinned.master");
  REQUIRE_FALSE(part.empty());
  REQUIRE_FALSE(master.empty());
  CHECK(moment == part);
  CHECK(std::stod(part) == Approx(0.75 * std::stod(master)).epsilon(0.01));
  const std::string planned = test::json_field(split.summary, "planned_pinned_bytes");
  CHECK(test::json_field(split.summary, "pinned") == planned);
  // zfcore estimate counts the same device part: its device column grows by what the ledger holds.
  auto device_estimate = [](const std::string &share) {
    test::Outcome out = test::run_command(test::zfcore() + " estimate --bytes " + test::default_stage_config() + " " +
                                          kWorkload + ratio(share.c_str()));
    INFO(out.output);
    REQUIRE(out.exit_code == 0);
    std::istringstream row(test::chosen_estimate_row(out.output, "offload cpu_optimizer"));  // zero0's
    std::string stage;
    double device = 0;
    row >> stage >> device;
    CHECK(stage == "zero0");
    return device;
  };
  const double part_bytes = std::stod(part) + 2 * std::stod(moment);
  CHECK(device_estimate("0.25") - device_estimate("1") == Approx(part_bytes).epsilon(0.001));
  test::Outcome automatic = test::run_command(test::zfcore() + " estimate --bytes " + test::default_stage_config() + " " +
                                              kWorkload + ratio("auto"));
  CHECK(automatic.output.find("plus what offload.ratio = \"auto\" keeps there after the first step") !=
        std::string::npos);
}

// linear_stack's buffers peak at 2.0 MiB where it computes (zero0), 1.8 MiB (zero2: a gradient shard
// and the blocks reducing, no whole gradient buffer) and 1.5 MiB (zero3: no whole parameters either)
// per rank before the split; the whole shard's master and moments need 3.0 MiB (one rank) or 1.5 MiB
// (two). These limits (GiB) leave room for about half of it.
struct AutoCase {
  std::string stage;
  int world;
  std::string tight;
};
const std::vector<AutoCase> kAutoCases = {{"zero0", 1, "0.0038"}, {"zero2", 2, "0.0028"}, {"zero3", 2, "0.0025"}};

std::string auto_ratio(const std::string &limit) {
  return ratio("auto") + "--set run.device_memory_limit_gb=" + limit + " ";
}

TEST_CASE("offload.ratio auto: all of it where the model computes when it fits, else the smallest host share that "
          "fits, with no offload's bits",
          "[offload][ratio][mpi]") {
  for (const AutoCase &c : kAutoCases) {
    INFO(c.stage << " on " << c.world << " ranks");
    const std::string base =
        kWorkload + (c.stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : std::string());
    test::StageRun none = run_ok("ra_none_" + c.stage, c.stage, c.world, base);
    test::StageRun ample = run_ok("ra_ample_" + c.stage, c.stage, c.world, base + auto_ratio("100"));
    CHECK(digest_of(ample) == digest_of(none));
    CHECK(test::json_number(ample.summary, "offload_ratio") == 0);
    CHECK(ample.outcome.output.find("offload.ratio = auto chose 0: every element") != std::string::npos);

    test::StageRun tight = run_ok("ra_tight_" + c.stage, c.stage, c.world, base + auto_ratio(c.tight));
    CHECK(digest_of(tight) == digest_of(none));
    const double share = test::json_number(tight.summary, "offload_ratio");
    CHECK(share > 0.1);
    CHECK(share < 0.9);
    // The device part and every other buffer where the model computes stay under the limit.
    CHECK(nlohmann::json::parse(tight.summary)["peak_memory_bytes"]["host"].get<double>() <
          std::stod(c.tight) * double(1ull << 30));
    const std::string part = test::json_field(tight.summary, "host.master (device part)");
    REQUIRE_FALSE(part.empty());
    CHECK(std::stod(part) == Approx((1 - share) * std::stod(test::json_field(tight.summary, "pinned.master")))
                                 .epsilon(0.01));
  }
}

TEST_CASE("offload.ratio auto on a CPU run without a limit keeps the whole shard on the host", "[offload][ratio]") {
  test::StageRun automatic = run_ok("ra_default", "zero0", 1, kWorkload + ratio("auto"));
  CHECK(test::json_number(automatic.summary, "offload_ratio") == 1);
  CHECK(automatic.outcome.output.find("a CPU run without run.device_memory_limit_gb") != std::string::npos);
  CHECK(test::json_field(automatic.summary, "host.master (device part)").empty());
}

TEST_CASE("offload.ratio auto resumed keeps its share, and from a fixed ratio's checkpoint it chooses one",
          "[offload][ratio]") {
  const std::string base = kWorkload + "--set checkpoint.every=2 --set train.steps=6 ";
  test::StageRun whole = run_ok("ra_whole", "zero1", 1, base + auto_ratio("0.0038"));
  // The first run checkpoints at 2 and 4 and stops at 4; the second resumes from 4 with its own settings.
  auto resume = [&](const std::string &name, const std::string &first_args, const std::string &resumed_args) {
    test::ResumedRun r = test::run_resumed(name, "zero1", 1, base + first_args, 4, 6, test::default_stage_config(), 4,
                                           resumed_args);
    test::require_resumed(r);
    CHECK(r.resumed.outcome.output.find("zfcore: resumed from") != std::string::npos);
    CHECK(digest_of(r.resumed) == digest_of(whole));
    return r.resumed;
  };
  // Given room for all of it, the resumed run keeps the share the checkpoint holds.
  test::StageRun kept = resume("ra_resume_kept", auto_ratio("0.0038"), auto_ratio("100"));
  CHECK(kept.outcome.output.find("auto chose") == std::string::npos);
  CHECK(test::json_field(kept.summary, "offload_ratio") == test::json_field(whole.summary, "offload_ratio"));
  // A checkpoint of offload.ratio = 0.3 holds no choice: auto makes one.
  test::StageRun chosen = resume("ra_resume_fixed", ratio("0.3"), auto_ratio("100"));
  CHECK(chosen.outcome.output.find("offload.ratio = auto chose 0") != std::string::npos);
  CHECK(test::json_number(chosen.summary, "offload_ratio") == 0);
}

TEST_CASE("offload.ratio with ZenFlow, with cpu_full or out of range is refused before the first step", "[offload][ratio]") {
  struct Case {
    std::string args, says;
  };
  const std::string nvme_params = "--set offload.plugin=nvme --set offload.offload_params=true --set offload.path=" +
                                  test::scratch_dir("ratio_refused_nvme") + " --set offload.ratio=auto";
  for (const Case &c : {Case{ratio("0.5") + "--set zenflow.topk_ratio=0.1", "both choose what the device updates"},
                        Case{ratio("auto") + "--set zenflow.topk_ratio=0.1", "offload.ratio = \"auto\" and [zenflow]"},
                        Case{"--set offload.plugin=cpu_full --set offload.ratio=0.5", "offload.ratio"},
                        Case{nvme_params, "offload.offload_params = true needs offload.ratio = 1"},
                        Case{ratio("1.5"), "offload.ratio = \"1.5\": expected a share from 0 to 1, or \"auto\""},
                        Case{ratio("most"), "offload.ratio = \"most\": expected a share from 0 to 1, or \"auto\""}}) {
    test::StageRun r = test::run_stage("ratio_refused", "zero0", 1, kWorkload + c.args);
    INFO(c.args << "\n" << r.outcome.output);
    CHECK(r.outcome.exit_code != 0);
    CHECK(r.outcome.output.find(c.says) != std::string::npos);
    CHECK(r.outcome.output.find("step 1") == std::string::npos);
  }
}
