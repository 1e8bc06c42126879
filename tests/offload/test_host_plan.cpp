// Host memory and checkpoint disk are tiers of the memory plan: the ranks of a host share its
// memory, every rank's checkpoint file lands in one directory. Oracles: the arithmetic of the
// ways out (unit), and runs: a budget between the fp32-moment and the bf16-moment plans refuses
// the first before step 1 and names bf16 moments, which then run under that budget; a checkpoint
// budget 10% under a real checkpoint's bytes refuses, 10% over runs (the plan's size is the real
// one within 10%); `zfcore estimate --world 4` sums each tier per host as 4 x the rank's.
#include "memory/host_plan.hpp"
#include "runtime/error.hpp"
#include "runtime/memory.hpp"
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <sstream>
#include <string>

using namespace zf;
namespace fs = std::filesystem;

namespace {

constexpr uint64_t GiB = 1ull << 30;

std::string gib(double bytes) { return format("%.9f", bytes / double(GiB)); }

// zero3 on 2 ranks of this host, optimizer state in pinned host memory, one step.
const std::string kRun = "--set train.steps=1 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam "
                         "--set optimizer.threads=1 --set offload.plugin=cpu_optimizer ";

double host_bytes(const test::StageRun &r) {
  return test::json_number(r.summary, "planned_host_bytes") + test::json_number(r.summary, "planned_pinned_bytes");
}

uint64_t directory_bytes(const fs::path &dir) {
  uint64_t total = 0;
  for (const auto &entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) total += entry.file_size();
  return total;
}

// The byte counts of an estimate table's row ("  pinned host   123  492  ..."): per rank, per host.
std::pair<uint64_t, uint64_t> tier_row(const std::string &output, const std::string &tier) {
  std::stringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("  " + tier + " ", 0) == 0) {
      std::stringstream cells(line.substr(tier.size() + 2));
      uint64_t rank = 0, host = 0;
      cells >> rank >> host;
      return {rank, host};
    }
  FAIL("no row '" << tier << "' in\n" << output);
  return {0, 0};
}

}  // namespace

TEST_CASE("host memory: each way out of a plan over the host's budget comes with its figure per host", "[offload]") {
  HostDemand d;
  d.rank.pinned = 60 * GiB;
  d.rank.pageable = 40 * GiB;
  d.ranks_per_host = 4;
  d.world = 4;
  d.state_on_host = 48 * GiB;  // fp32 moments
  d.moments_halvable = true;
  d.nvme_available = true;
  REQUIRE(d.per_host() == 400 * GiB);
  // bf16 moments: (100 - 24) x 4 = 304; moments on disk: (100 - 48) x 4 = 208; 3 ranks: 300.
  std::string all = host_ways_out(d, 350 * GiB);
  CHECK_THAT(all, Catch::StartsWith("Settings that fit: optimizer.moment_dtype = \"bf16\""));
  CHECK_THAT(all, Catch::Contains(": " + format_bytes(304 * GiB) + " per host"));
  CHECK_THAT(all, Catch::Contains("offload.plugin = \"nvme\""));
  CHECK_THAT(all, Catch::Contains(": " + format_bytes(208 * GiB) + " per host"));
  CHECK_THAT(all, Catch::Contains("3 ranks per host instead of 4 (mpirun --map-by ppr:3:node; the 4 ranks over 2 hosts): " +
                                  format_bytes(300 * GiB)));
  CHECK_THAT(all, !Catch::Contains("Not enough"));
  // 250: bf16 alone is not enough, disk and 2 ranks per host are.
  std::string some = host_ways_out(d, 250 * GiB);
  CHECK_THAT(some, Catch::Contains("Not enough alone: optimizer.moment_dtype = \"bf16\""));
  CHECK_THAT(some, Catch::Contains("2 ranks per host instead of 4"));
  // Below one rank nothing does, and fewer ranks per host is not offered.
  std::string none = host_ways_out(d, 50 * GiB);
  CHECK_THAT(none, Catch::StartsWith("No setting of this run fits alone"));
  CHECK_THAT(none, !Catch::Contains("ranks per host"));
  CHECK_THAT(none, Catch::Contains("A smaller model, more hosts"));
  // Only what this run accepts: no moment_dtype for an optimizer without it, no nvme without the plugin.
  d.moments_halvable = d.nvme_available = false;
  std::string ranks_only = host_ways_out(d, 250 * GiB);
  CHECK_THAT(ranks_only, !Catch::Contains("moment_dtype") && !Catch::Contains("nvme"));
  CHECK_THAT(ranks_only, Catch::Contains("2 ranks per host"));
}

TEST_CASE("checkpoint disk: keep + 1 checkpoints at once, refused with the settings that fit", "[offload]") {
  CHECK(checkpoint_copies(10, 0, true, 2) == 1);   // only the final one
  CHECK(checkpoint_copies(10, 0, false, 2) == 0);  // none
  CHECK(checkpoint_copies(10, 2, true, 2) == 3);   // 5 saves, the newest written before the oldest goes
  CHECK(checkpoint_copies(10, 5, true, 5) == 2);   // steps 5 and 10 (the final one is step 10's)
  CHECK(checkpoint_copies(10, 3, true, 1) == 2);

  CheckpointDemand d;
  d.directory = "ckpt";
  d.bytes_per_rank = 12 * GiB;
  d.state_per_rank = 8 * GiB;
  d.world = 4;
  d.keep = 2;
  d.copies = 3;
  d.moments_halvable = true;
  REQUIRE(d.needed() == 144 * GiB);
  CHECK_NOTHROW(check_checkpoint_space(d, {144 * GiB, "checkpoint.disk_limit_gb"}));
  try {
    check_checkpoint_space(d, {100 * GiB, "checkpoint.disk_limit_gb"});
    FAIL("a 144 GiB plan fit 100 GiB");
  } catch (const Error &refused) {
    const std::string text = refused.what();
    CHECK_THAT(text, Catch::Contains("one checkpoint is " + format_bytes(48 * GiB) + " (4 ranks x " +
                                     format_bytes(12 * GiB)));
    CHECK_THAT(text, Catch::Contains("up to 3 on disk at once (checkpoint.keep = 2"));
    CHECK_THAT(text, Catch::Contains("checkpoint.keep = 1 (2 on disk at once): " + format_bytes(96 * GiB)));
    CHECK_THAT(text, Catch::Contains("optimizer.moment_dtype = \"bf16\": " + format_bytes(96 * GiB)));
    CHECK_THAT(text, Catch::Contains("both: " + format_bytes(64 * GiB)));
    CHECK_THAT(text, Catch::Contains("checkpoint.dir = a directory on a disk with " + format_bytes(144 * GiB)));
  }
  // Without a budget, the checkpoints there already make room as the new ones come.
  d.existing = 50 * GiB;
  CHECK_NOTHROW(check_checkpoint_space(d, {100 * GiB, "free space of /"}));
  // The free space of a directory not made yet is its nearest existing parent's.
  DiskSpace space = disk_space(test::scratch_dir("host_plan_space") + "/not/made/yet", 0);
  CHECK(space.bytes > 0);
  CHECK_THAT(space.source, Catch::Contains("free space of ") && Catch::Contains("host_plan_space") &&
                               !Catch::Contains("not/made"));
}

TEST_CASE("a plan over the host's budget is refused before step 1 naming bf16 moments, which then run", "[offload][mpi]") {
  test::StageRun f32 = test::run_stage_ok("host_f32", "zero3", 2, kRun + "--set checkpoint.final=false");
  test::StageRun bf16 =
      test::run_stage_ok("host_bf16", "zero3", 2, kRun + "--set checkpoint.final=false --set optimizer.moment_dtype=bf16");
  const double wide = host_bytes(f32), narrow = host_bytes(bf16);
  REQUIRE(narrow < wide);
  // Two ranks on this host: a budget halfway between their two sums.
  const std::string budget = "--set run.host_memory_limit_gb=" + gib(wide + narrow) + " ";
  test::StageRun refused = test::run_stage("host_refused", "zero3", 2, kRun + budget);
  INFO(refused.outcome.output);
  CHECK(refused.outcome.exit_code != 0);
  CHECK_THAT(refused.outcome.output, Catch::Contains("the memory plan does not fit") &&
                                         Catch::Contains("for the 2 ranks of this host") &&
                                         Catch::Contains("run.host_memory_limit_gb"));
  CHECK_THAT(refused.outcome.output, Catch::Contains("Settings that fit: optimizer.moment_dtype = \"bf16\" (half the "
                                                     "moments' bytes): " + format_bytes(uint64_t(2 * narrow))));
  CHECK_THAT(refused.outcome.output, Catch::Contains("1 rank per host instead of 2"));
  CHECK_FALSE(fs::exists(refused.dir + "/steps.jsonl"));  // before step 1
  // The setting it named runs under the same budget.
  test::run_stage_ok("host_taken", "zero3", 2, kRun + budget + "--set optimizer.moment_dtype=bf16");
  // Under one rank's bytes nothing of this run fits alone.
  test::StageRun tiny = test::run_stage("host_tiny", "zero3", 2, kRun + "--set run.host_memory_limit_gb=0.0001");
  INFO(tiny.outcome.output);
  CHECK(tiny.outcome.exit_code != 0);
  CHECK_THAT(tiny.outcome.output, Catch::Contains("No setting of this run fits alone"));
}

TEST_CASE("checkpoints that cannot fit their disk are refused before step 1, and the plan's size is the real one",
          "[offload][mpi]") {
  test::StageRun saved = test::run_stage_ok("ckpt_real", "zero3", 2, kRun);
  const double real = double(directory_bytes(saved.dir + "/checkpoints/step-00000001"));
  REQUIRE(real > 0);
  CHECK_THAT(saved.outcome.output, Catch::Contains("zfcore: checkpoints: "));
  const std::string under = "--set checkpoint.disk_limit_gb=" + gib(0.9 * real) + " ";
  test::StageRun refused = test::run_stage("ckpt_refused", "zero3", 2, kRun + under);
  INFO(refused.outcome.output);
  CHECK(refused.outcome.exit_code != 0);
  CHECK_THAT(refused.outcome.output, Catch::Contains("the checkpoints do not fit their disk") &&
                                         Catch::Contains("(checkpoint.disk_limit_gb)") &&
                                         Catch::Contains("Settings that fit: optimizer.moment_dtype = \"bf16\""));
  CHECK_FALSE(fs::exists(refused.dir + "/steps.jsonl"));
  CHECK_FALSE(fs::exists(refused.dir + "/checkpoints/step-00000001"));
  test::run_stage_ok("ckpt_over", "zero3", 2, kRun + "--set checkpoint.disk_limit_gb=" + gib(1.1 * real));
  test::run_stage_ok("ckpt_taken", "zero3", 2, kRun + under + "--set optimizer.moment_dtype=bf16");
}

TEST_CASE("zfcore estimate --world 4 lists every tier per rank and per host, the host's budget and the checkpoint",
          "[offload][estimate]") {
  const std::string estimate = test::zfcore() + " estimate --bytes " + test::source_dir() + "/examples/linear_stack.toml" +
                               " --world 4 --set stage.plugin=zero3 --set offload.plugin=cpu_optimizer"
                               " --set optimizer.plugin=cpu_adam ";
  test::Outcome four = test::run_command(estimate + "--set run.host_memory_limit_gb=1000");
  INFO(four.output);
  REQUIRE(four.exit_code == 0);
  CHECK_THAT(four.output, Catch::Contains("4 ranks, 4 per host (1 host)"));
  for (const char *tier : {"device (CPU)", "pinned host", "pageable host", "disk (nvme)", "host memory"}) {
    auto [rank, host] = tier_row(four.output, tier);
    CHECK(host == 4 * rank);
  }
  CHECK(tier_row(four.output, "pinned host").first > 0);
  CHECK_THAT(four.output, Catch::Contains("this host allows 1000.0 GiB (run.host_memory_limit_gb): fits"));
  CHECK_THAT(four.output, Catch::Contains("checkpoint: "));

  test::Outcome two = test::run_command(estimate + "--ranks-per-host 2 --set run.host_memory_limit_gb=0.0001"
                                                   " --set checkpoint.disk_limit_gb=0.0001");
  INFO(two.output);
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.output, Catch::Contains("4 ranks, 2 per host (2 hosts)"));
  auto [rank, host] = tier_row(two.output, "host memory");
  CHECK(host == 2 * rank);
  CHECK_THAT(two.output, Catch::Contains(": does not fit") && Catch::Contains("No setting of this run fits alone"));
  CHECK_THAT(two.output, Catch::Contains("the checkpoints do not fit their disk"));

  // The models people offload for, on one 4-GPU node.
  std::string preset = test::scratch_dir("estimate_32b") + "/preset.toml";
  test::run_command("printf '[model]\\npreset = \"qwen2.5-32b\"\\ndtype = \"bfloat16\"\\n[stage]\\nplugin = \"zero3\"\\n"
                    "[offload]\\nplugin = \"cpu_optimizer\"\\n[optimizer]\\nplugin = \"cpu_adam\"\\n' > " + preset);
  test::Outcome big = test::run_command(test::zfcore() + " estimate --bytes " + preset + " --world 4");
  INFO(big.output);
  CHECK(big.exit_code == 0);
  CHECK_THAT(big.output, Catch::Contains("qwen2, 32763876352 parameters"));
  CHECK(tier_row(big.output, "pinned host").second == 4 * tier_row(big.output, "pinned host").first);
}
