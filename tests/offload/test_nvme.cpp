// nvme computes what cpu_optimizer computes, with the optimizer state in real files under
// offload.path, streamed through three tile buffers by io_uring or by the pread/pwrite threads.
// Oracle: cpu_optimizer with the same stage, world size and batch (the update is elementwise, so
// where the state waits between steps changes no bit). Tiles are much smaller than a layer here
// (bucket_size 5000 -> tiles of 8192 elements), so every step streams dozens of them.
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <string>

using namespace zf;
using test::run_stage_ok;

namespace {

const std::string kWorkload =
    "--set train.steps=4 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam --set optimizer.threads=1 "
    "--set train.clip_grad_norm=0.5 ";
const std::string kCpuOffload = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";

std::string nvme(const std::string &dir, const std::string &more = "") {
  return "--set offload.plugin=nvme --set offload.bucket_size=5000 --set offload.path=" + dir + " " + more + " ";
}

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

bool empty_directory(const std::string &dir) {
  return std::filesystem::is_directory(dir) && std::filesystem::is_empty(dir);
}


}  // namespace

TEST_CASE("nvme gives cpu_optimizer's param_digest under zero0-zero3 on 2 ranks", "[offload][nvme][mpi]") {
  for (const std::string &stage : {"zero0", "zero1", "zero2", "zero3"}) {
    std::string base = kWorkload + (stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "");
    test::StageRun cpu = run_stage_ok("nvme_cpu_" + stage, stage, 2, base + kCpuOffload);
    std::string files = test::scratch_dir("nvme_files_" + stage);
    test::StageRun disk = run_stage_ok("nvme_disk_" + stage, stage, 2, base + nvme(files));
    CHECK(digest_of(disk).size() == 16);
    CHECK(digest_of(disk) == digest_of(cpu));
    CHECK(test::json_field(disk.summary, "final_loss") == test::json_field(cpu.summary, "final_loss"));
    CHECK(empty_directory(files));  // the state files are gone with the run
  }
}

// ZeRO-Infinity: the parameters in host memory (as cpu_full keeps them) and the optimizer state on
// disk. Oracle: cpu_full, the same but for where the state waits between steps.
TEST_CASE("nvme with offload_params gives cpu_full's param_digest under zero0 and zero3, holds the parameters in "
          "pinned memory and resumes", "[offload][nvme][mpi]") {
  const std::string kFull = "--set offload.plugin=cpu_full --set offload.bucket_size=5000 ";
  for (const std::string &stage : {"zero0", "zero3"}) {
    std::string base = kWorkload + "--set model.dtype=bfloat16 " +
                       (stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "");
    test::StageRun full = run_stage_ok("nvme_params_full_" + stage, stage, 2, base + kFull);
    std::string files = test::scratch_dir("nvme_params_files_" + stage);
    test::StageRun both = run_stage_ok("nvme_params_" + stage, stage, 2,
                                       base + nvme(files, "--set offload.offload_params=true"));
    INFO(stage);
    CHECK(digest_of(both).size() == 16);
    CHECK(digest_of(both) == digest_of(full));
    auto ledger = [&](const std::string &tag) { return test::ledger_bytes(both.summary, "memory_bytes", tag); };
    // bf16 working parameters (zero3: the rank's shard) beside the fp32 master, none where the model computes
    const std::string params = stage == "zero3" ? "params.shard" : "params";
    CHECK(ledger("pinned." + params) == ledger("pinned.master") / 2);
    CHECK(ledger("host." + params) == 0);
    CHECK(ledger("nvme.nvme.state") >= 2 * ledger("pinned.master"));  // Adam's two fp32 moments on disk, in tiles
    CHECK(empty_directory(files));
    // zfcore estimate's nvme table predicts the run's pinned bytes (its note adds the disk tiles).
    // (Under zero3 the plan counts the whole bf16 parameters, which exist while the shards are cut
    // at start-up; the steps hold the shard, which is what the estimate gives.)
    if (stage != "zero0") continue;
    test::Outcome estimate =
        test::run_command(test::zfcore() + " estimate --bytes " + test::default_stage_config() + " --world 2 " + base +
                          nvme(files, "--set offload.offload_params=true") + "--set stage.plugin=" + stage);
    INFO(estimate.output);
    REQUIRE(estimate.exit_code == 0);
    uint64_t tiles = 0;
    for (const char *moment : {"exp_avg", "exp_avg_sq"})
      tiles += ledger(std::string("pinned.cpu_adam.") + moment + " (disk tiles)");
    const std::string pinned = std::to_string(std::stoull(test::json_field(both.summary, "planned_pinned_bytes")) - tiles);
    CHECK_THAT(test::chosen_estimate_row(estimate.output, "offload nvme"), Catch::Contains(" " + pinned + " "));
  }
  std::string files = test::scratch_dir("nvme_params_resume_files");
  std::string base = kWorkload + nvme(files, "--set offload.offload_params=true") + "--set checkpoint.every=2 ";
  test::StageRun whole = run_stage_ok("nvme_params_whole", "zero3", 1, base + "--set train.steps=6");
  test::ResumedRun r = test::run_resumed("nvme_params_resume", "zero3", 1, base, 4, 6);
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(whole));

  // The parameters in host memory take the whole optimizer shard there: no offload.ratio beside them.
  test::StageRun split = test::run_stage("nvme_params_ratio", "zero0", 1,
                                         kWorkload + nvme(test::scratch_dir("nvme_params_ratio_files"),
                                                          "--set offload.offload_params=true --set offload.ratio=0.5"));
  CHECK(split.outcome.exit_code != 0);
  CHECK_THAT(split.outcome.output, Catch::Contains("offload.offload_params = true needs offload.ratio = 1"));
}

TEST_CASE("io_uring and the pread/pwrite fallback, a host budget and bf16 give the same bits", "[offload][nvme]") {
  for (const std::string &dtype : {"float32", "bfloat16"}) {
    std::string base = kWorkload + "--set train.grad_accum=2 --set model.dtype=" + dtype + " ";
    test::StageRun cpu = run_stage_ok("nvme1_cpu_" + dtype, "zero0", 1, base + kCpuOffload);
    std::string files = test::scratch_dir("nvme1_files_" + dtype);
    test::StageRun uring = run_stage_ok(
        "nvme1_uring_" + dtype, "zero0", 1,
        base + nvme(files, "--set offload.io_backend=auto --set run.wall_clock_breakdown=true"));
    test::StageRun threads =
        run_stage_ok("nvme1_threads_" + dtype, "zero0", 1, base + nvme(files, "--set offload.io_backend=threads"));
    // About half of the state (2 x 4 bytes x 263k elements) in RAM, the rest on disk; and the
    // buckets updated during the backward, in its order (the read-ahead guesses wrong: re-read).
    test::StageRun budget = run_stage_ok("nvme1_budget_" + dtype, "zero0", 1,
                                   base + nvme(files, "--set offload.host_budget_gb=0.001 --set offload.overlap=true"));
    INFO(dtype);
    CHECK(digest_of(uring) == digest_of(cpu));
    CHECK(digest_of(threads) == digest_of(cpu));
    CHECK(digest_of(budget) == digest_of(cpu));
    // The fallback says so, once; auto falls back only where the kernel refuses io_uring, and says why.
    CHECK(threads.outcome.output.find("pread/pwrite") != std::string::npos);
    if (uring.outcome.output.find("pread/pwrite") != std::string::npos)
      CHECK_THAT(uring.outcome.output, Catch::Contains("io_uring is not available here ("));
    // The memory plan shows the disk tier, and the bytes moved are reported: every step reads and
    // writes all of the state (at least 8 bytes per parameter with fp32 moments), plus the first write.
    CHECK(uring.outcome.output.find("nvme ") != std::string::npos);
    // run.wall_clock_breakdown: a line of timers under each step line, the disk's wait among them.
    CHECK_THAT(uring.outcome.output, Catch::Contains("\n  time (ms) | ") && Catch::Contains("| disk_wait: "));
    CHECK_THAT(threads.outcome.output, !Catch::Contains("time (ms)"));
    const double written = std::stod(test::json_field(uring.summary, "nvme_bytes_written"));
    const double read = std::stod(test::json_field(uring.summary, "nvme_bytes_read"));
    const double params = 263168;  // linear_stack's
    CHECK(written >= 5 * 8 * params);
    CHECK(read >= 4 * 8 * params);
    // Counted at the host, budget or not; a tile split by a block boundary is written twice.
    CHECK(std::stod(test::json_field(budget.summary, "nvme_bytes_written")) >= written);
    CHECK(std::stod(test::json_field(budget.summary, "nvme_bytes_read")) >= read);
    CHECK(empty_directory(files));
  }
  // bf16 moments: half the bytes on disk, the same bits as cpu_optimizer's bf16 moments.
  std::string bf16 = kWorkload + "--set optimizer.moment_dtype=bf16 ";
  test::StageRun cpu = run_stage_ok("nvme_m16_cpu", "zero0", 1, bf16 + kCpuOffload);
  test::StageRun disk = run_stage_ok("nvme_m16_disk", "zero0", 1, bf16 + nvme(test::scratch_dir("nvme_m16_files")));
  CHECK(digest_of(disk) == digest_of(cpu));
}

TEST_CASE("an nvme run resumes bit for bit, also after kill -9, and its checkpoint holds the state", "[offload][nvme]") {
  std::string files = test::scratch_dir("nvme_resume_files");
  std::string base = kWorkload + nvme(files) + "--set checkpoint.every=2 ";
  test::StageRun whole = run_stage_ok("nvme_whole", "zero0", 1, base + "--set train.steps=6");
  test::ResumedRun r = test::run_resumed("nvme_resume", "zero0", 1, base, 4, 6);
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(whole));

  // The checkpoint's state is the state: cpu_optimizer continues an nvme checkpoint exactly.
  test::StageRun cpu_whole =
      run_stage_ok("nvme_cpu_whole", "zero0", 1, kWorkload + kCpuOffload + "--set train.steps=6");
  CHECK(digest_of(cpu_whole) == digest_of(whole));
  test::StageRun crossed = run_stage_ok("nvme_crossed", "zero0", 1,
                                  kWorkload + kCpuOffload + "--set train.steps=6 --set checkpoint.resume=" +
                                      whole.dir + "/../nvme_resume/checkpoints/step-00000004");
  CHECK(crossed.outcome.output.find("resumed from") != std::string::npos);
  CHECK(digest_of(crossed) == digest_of(whole));

  // kill -9 while the run streams its state (after its first checkpoint): nothing stays on disk, and
  // the same command resumes to the uninterrupted result. (The command runs under `timeout`: the
  // kill goes to zfcore, its child.)
  std::string every = base + "--set checkpoint.every=50 ";
  std::string dir = test::scratch_dir("nvme_killed");
  std::string command = test::stage_command(dir, "zero0", 1, every, test::default_stage_config());
  test::StageRun long_run = run_stage_ok("nvme_long", "zero0", 1, every + "--set train.steps=400");
  test::Outcome killed = test::run_command(
      "(" + command + " --set train.steps=400 > " + dir + "/log 2>&1 & pid=$!; "
      "for i in $(seq 600); do [ -d " + dir + "/checkpoints/step-00000050 ] && break; sleep 0.05; done; "
      "kill -9 $(pgrep -P $pid); wait $pid; echo killed $?)");
  INFO(killed.output << test::read_text(dir + "/log"));
  REQUIRE(killed.output.find("killed 137") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir + "/summary.json"));  // it did not finish
  CHECK(empty_directory(files));
  test::Outcome resumed = test::run_command(command + " --set train.steps=400");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(resumed.output.find("resumed from") != std::string::npos);
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "param_digest") == digest_of(long_run));
}

TEST_CASE("a full disk ends an nvme run with the file, offset and bytes, the last checkpoint resumes",
          "[offload][nvme]") {
  std::string files = test::scratch_dir("nvme_full_files");
  std::string base = kWorkload + nvme(files) + "--set checkpoint.every=2 ";
  test::StageRun whole = run_stage_ok("nvme_full_whole", "zero0", 1, base + "--set train.steps=6");
  std::string dir = test::scratch_dir("nvme_full");
  std::string command = test::stage_command(dir, "zero0", 1, base, test::default_stage_config());
  test::Outcome first = test::run_command(command + " --set train.steps=4");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // Files may not grow past 256 KiB: the state files (1 MB each) fail while being written.
  test::Outcome full = test::run_command("bash -c 'ulimit -f 256; " + command + " --set train.steps=6'");
  INFO(full.output);
  CHECK(full.exit_code != 0);
  CHECK_THAT(full.output, Catch::Contains("write of") && Catch::Contains("bytes at offset") &&
                              Catch::Contains(files + "/zfcore-rank0-") && Catch::Contains("File too large"));
  CHECK(std::filesystem::exists(dir + "/checkpoints/step-00000004/checkpoint.json"));
  test::Outcome resumed = test::run_command(command + " --set train.steps=6");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  CHECK(test::json_field(test::read_text(dir + "/summary.json"), "param_digest") == digest_of(whole));
}

TEST_CASE("nvme without a usable path is refused before the first step, naming the path", "[offload][nvme]") {
  test::StageRun no_path = test::run_stage("nvme_no_path", "zero0", 1, kWorkload + "--set offload.plugin=nvme");
  CHECK(no_path.outcome.exit_code != 0);
  CHECK_THAT(no_path.outcome.output, Catch::Contains("offload.path is required"));

  test::StageRun bad_path =
      test::run_stage("nvme_bad_path", "zero0", 1, kWorkload + nvme("/proc/zfcore-nvme-test"));
  CHECK(bad_path.outcome.exit_code != 0);
  CHECK_THAT(bad_path.outcome.output, Catch::Contains("/proc/zfcore-nvme-test"));
}

TEST_CASE("ZenFlow with its state on disk gives ZenFlow in RAM's bits, and resumes mid-interval", "[offload][nvme][zenflow]") {
  // Selections at steps 1, 5 and 9 move columns' master and moments between the disk and the
  // device; the CPU jobs stream the other columns' tiles, a third of them each step. The staggered
  // schedule's groups are whole buckets: the disk's tiles (8192 elements) in both runs.
  std::string zen = kWorkload + "--set zenflow.update_interval=3 --set zenflow.topk_ratio=0.3 "
                    "--set zenflow.select_strategy=step --set zenflow.select_interval=4 --set checkpoint.every=2 ";
  const std::string tiles = "--set offload.bucket_size=8192 ";
  test::StageRun ram = run_stage_ok("nvme_zf_ram", "zero0", 1, zen + kCpuOffload + tiles + "--set train.steps=10");
  std::string files = test::scratch_dir("nvme_zf_files");
  test::StageRun disk = run_stage_ok("nvme_zf_disk", "zero0", 1, zen + nvme(files) + tiles + "--set train.steps=10");
  CHECK(test::json_field(disk.summary, "zenflow_selections") == "3");
  CHECK_THAT(disk.outcome.output, Catch::Contains("| update select,gpu"));  // the step line says what ran
  CHECK(digest_of(disk) == digest_of(ram));
  test::ResumedRun r = test::run_resumed("nvme_zf_resume", "zero0", 1, zen + nvme(files) + tiles, 5, 10,
                                         test::default_stage_config(), /*resume_step=*/4);
  test::require_resumed(r);
  CHECK(digest_of(r.resumed) == digest_of(ram));
  CHECK(empty_directory(files));
}
