// `zfcore bench stages | offload | zenflow` on CPU with a tiny GPT: the files users read (JSON, CSV,
// HTML, the console table, recommended-<suite>.toml), a failing configuration as an `error` row
// while the suite goes on, usage errors, the recommendation fed recorded rows (with trials: medians,
// and differences within the trials' spread called noise), and two configurations that do the same
// work (zero0 and zero1 on one rank) measured within noise of each other.
#include "bench/suite.hpp"
#include "config/config.hpp"
#include "support/process.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace zf;
namespace fs = std::filesystem;

namespace {

std::string tiny() { return test::source_dir() + "/tests/bench/tiny_bench.toml"; }

test::Outcome bench(const std::string &args, const std::string &dir) {
  return test::run_command("MPIEXEC=" + std::string(ZF_TEST_MPIEXEC) + " timeout 300 " + test::zfcore() + " bench " +
                           args + " --device cpu --model " + tiny() +
                           " --num-steps 2 --warmup-steps 1 --set run.threads=1 --output-dir " + dir);
}

// The one file of dir named <prefix>_<time><ext>.
std::string output_file(const std::string &dir, const std::string &prefix, const std::string &ext) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir)) {
    std::string name = entry.path().filename().string();
    if (name.rfind(prefix + "_", 0) == 0 && entry.path().extension() == ext) found.push_back(entry.path().string());
  }
  REQUIRE(found.size() == 1);
  return found[0];
}

// `zfcore bench SUITE ARGS` into a fresh scratch directory `name`: it must succeed; its JSON is read.
struct SuiteRun {
  std::string dir;
  test::Outcome outcome;
  nlohmann::json result;
};
SuiteRun bench_ok(const std::string &suite, const std::string &args, const std::string &name) {
  SuiteRun r;
  r.dir = test::scratch_dir(name);
  r.outcome = bench(suite + " " + args, r.dir);
  INFO(r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  r.result = nlohmann::json::parse(test::read_text(output_file(r.dir, suite, ".json")));
  return r;
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

size_t commas(const std::string &line) { return size_t(std::count(line.begin(), line.end(), ',')); }

const nlohmann::json &row_named(const nlohmann::json &result, const std::string &name) {
  for (const auto &row : result["rows"])
    if (row["config"] == name) return row;
  FAIL("no row " << name);
  throw;
}

}  // namespace

TEST_CASE("bench stages: every row measured, JSON + CSV + table, a recommended.toml that validates", "[bench]") {
  std::string dir = test::scratch_dir("bench_stages");
  auto outcome = bench("stages --stages 0 1", dir);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  for (const char *column : {"config", "status", "step ms", "tokens/s", "GPU peak", "GPU end", "host RSS", "pinned",
                             "estimate", "message", "recommended: ",
                             "one trial per configuration: the verdict has no noise estimate"})
    CHECK_THAT(outcome.output, Catch::Contains(column));

  nlohmann::json result = nlohmann::json::parse(test::read_text(output_file(dir, "stages", ".json")));
  REQUIRE(result["rows"].size() == 2);
  std::string fastest;
  double best = 1e300;
  for (const auto &row : result["rows"]) {
    INFO(row.dump());
    CHECK(row["status"] == "ok");
    CHECK(row["timed_steps"] == 2);
    CHECK(row["step_times_ms"].size() == 3);  // the warm-up step is recorded, not counted
    CHECK(row["mean_step_ms"].get<double>() > 0);
    CHECK(row["tokens_per_s"].get<double>() > 0);
    CHECK(row["host_rss_bytes"].get<uint64_t>() > 10u << 20);  // a real process with libtorch loaded
    CHECK(row["estimate_bytes"].get<uint64_t>() > 0);
    // Where the suite's time goes: the process's whole life, and its start-up before step 1.
    CHECK(row["startup_s"].get<double>() > 0);
    CHECK(row["wall_s"].get<double>() > row["startup_s"].get<double>() + 2 * 1e-3 * row["mean_step_ms"].get<double>());
    if (row["mean_step_ms"].get<double>() < best) {
      best = row["mean_step_ms"].get<double>();
      fastest = row["config"];
    }
  }
  CHECK(result["recommended"] == fastest);
  CHECK(row_named(result, fastest)["reason"].get<std::string>().rfind("fastest that fits", 0) == 0);

  // The HTML report beside them (test_bench_report loads one in a browser): its charts name every row.
  std::string html = test::read_text(output_file(dir, "stages", ".html"));
  for (const char *label : {"class=\"label\">zero0<", "class=\"label\">zero1<", "data-chart=\"step-time\"",
                            "data-chart=\"memory\"", "data-chart=\"step-trace\""})
    CHECK_THAT(html, Catch::Contains(label));

  std::vector<std::string> csv = lines_of(test::read_text(output_file(dir, "stages", ".csv")));
  REQUIRE(csv.size() == 3);
  CHECK(csv[0].rfind("suite,config,trial,status,mean_step_ms", 0) == 0);
  CHECK(commas(csv[1]) == commas(csv[0]));
  CHECK(commas(csv[2]) == commas(csv[0]));

  // recommended-stages.toml is a config `zfcore validate` accepts, with the fastest stage written in.
  CHECK(!fs::exists(dir + "/recommended.toml"));
  auto valid = test::run_command(test::zfcore() + " validate " + dir + "/recommended-stages.toml");
  INFO(valid.output);
  CHECK(valid.exit_code == 0);
  CHECK_THAT(valid.output, Catch::Contains("stage " + fastest + ","));

  // A row is the same training as a plain `zfcore run` of its configuration: the warm-up step, the
  // timed steps and a cool-down step, whose time (the end of its own update too) is left out.
  std::string plain_dir = test::scratch_dir("bench_stages_plain");
  auto plain = test::run_command(test::zfcore() + " run " + tiny() + " --set stage.plugin=zero1 --set train.steps=4 " +
                                 "--set run.threads=1 --set run.output_dir=" + plain_dir);
  REQUIRE(plain.exit_code == 0);
  std::string digest = test::json_field(test::read_text(plain_dir + "/summary.json"), "param_digest");
  const nlohmann::json &zero1 = row_named(result, "zero1");
  std::string row_dir = zero1["run_dir"];
  CHECK(test::json_field(test::read_text(row_dir + "/summary.json"), "param_digest") == digest);
  std::vector<std::string> steps = lines_of(test::read_text(row_dir + "/steps.jsonl"));
  REQUIRE(steps.size() == 4);
  const double timed = nlohmann::json::parse(steps[1])["step_ms"].get<double>() +
                       nlohmann::json::parse(steps[2])["step_ms"].get<double>();
  CHECK(zero1["mean_step_ms"].get<double>() == Approx(timed / 2).epsilon(1e-9));
}

TEST_CASE("bench offload: a configuration that fails is an error row with its message, and the suite goes on",
          "[bench]") {
  std::string dir = test::scratch_dir("bench_offload");
  // nvme on a path no one can create: that configuration fails before its first step.
  auto outcome = bench("offload --strategies none nvme --nvme-path /proc/zfcore-no-such-dir", dir);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  nlohmann::json result = nlohmann::json::parse(test::read_text(output_file(dir, "offload", ".json")));
  REQUIRE(result["rows"].size() == 2);
  CHECK(row_named(result, "none")["status"] == "ok");
  const auto &failed = row_named(result, "nvme");
  CHECK(failed["status"] == "error");
  CHECK_THAT(failed["message"].get<std::string>(), Catch::Contains("/proc/zfcore-no-such-dir"));
  CHECK_THAT(failed["reason"].get<std::string>(), Catch::StartsWith("error: "));
  CHECK(result["recommended"] == "none");
  CHECK(fs::exists(dir + "/recommended-offload.toml"));
}

TEST_CASE("bench stages on 2 MPI ranks: each configuration runs under mpirun", "[bench][mpi]") {
  SuiteRun run = bench_ok("stages", "--stages 2 --gpus 2", "bench_stages_mpi");
  const auto &row = row_named(run.result, "zero2");
  CHECK(row["status"] == "ok");
  std::string run_dir = row["run_dir"];
  CHECK(test::json_field(test::read_text(run_dir + "/summary.json"), "world_size") == "2");
}

TEST_CASE("bench offload on 2 MPI ranks runs under ZeRO-2 as DeepSpeed's ZeRO-Offload does", "[bench][mpi]") {
  // The base config says zero0.
  SuiteRun run = bench_ok("offload", "--strategies cpu_optimizer --gpus 2", "bench_offload_mpi");
  CHECK_THAT(run.outcome.output, Catch::Contains("the rows run under stage.plugin = \"zero2\" on 2 ranks"));
  const auto &row = row_named(run.result, "cpu_optimizer");
  REQUIRE(row["status"] == "ok");
  nlohmann::json summary = nlohmann::json::parse(test::read_text(row["run_dir"].get<std::string>() + "/summary.json"));
  CHECK(summary["plugins"]["stage"]["name"] == "zero2");
  CHECK(summary["plugins"]["offload"]["name"] == "cpu_optimizer");
  CHECK_THAT(test::read_text(run.dir + "/recommended-offload.toml"), Catch::Contains("zero2"));
}

// The floor: the bytes a CPU update streams per step (an fp32 Adam over bf16 training: master and
// both moments read and written, the gradient read, the bf16 parameter written: 28 bytes an
// element) over the host's memory bandwidth, measured by the suite before its rows. On a CPU never
// the none row's step: that is as noisy as the rows it would judge (a GPU run takes it as the least
// an offloaded step can take).
TEST_CASE("bench offload: the floor is the CPU update's bytes per step over the host's measured bandwidth",
          "[bench][mpi]") {
  auto pinned_master = [](const nlohmann::json &row) {
    nlohmann::json summary = nlohmann::json::parse(test::read_text(row["run_dir"].get<std::string>() + "/summary.json"));
    return summary["memory_bytes"].value("pinned.master", uint64_t(0));
  };
  SuiteRun one = bench_ok("offload", "--strategies none cpu_optimizer --set model.dtype=bfloat16", "bench_floor");
  const double bandwidth = one.result["link_rates"]["host_bytes_per_s"].get<double>();
  CHECK(bandwidth > 1e9);                                              // a real machine streams GB/s
  CHECK(one.result["link_rates"]["down_bytes_per_s"].get<double>() == 0);  // a CPU run has no PCIe
  const auto &none = row_named(one.result, "none");
  CHECK(none["host_update_bytes_per_step"].get<double>() == 0);
  CHECK(none["floor_ms"].get<double>() == 0);
  const auto &cpu = row_named(one.result, "cpu_optimizer");
  const double bytes = cpu["host_update_bytes_per_step"].get<double>();
  CHECK(pinned_master(cpu) > 0);
  CHECK(bytes == 28.0 * double(pinned_master(cpu) / 4));
  CHECK(none["mean_step_ms"].get<double>() > 1e3 * bytes / bandwidth);  // the none row would have been the floor
  CHECK(cpu["floor_ms"].get<double>() == Approx(1e3 * bytes / bandwidth).epsilon(1e-6));
  for (const char *column : {"floor ms", "/ floor", "host's memory bandwidth"})
    CHECK_THAT(one.outcome.output, Catch::Contains(column));
  CHECK_THAT(test::read_text(output_file(one.dir, "offload", ".csv")), Catch::Contains(",tokens_per_s,floor_ms,"));

  // Two ranks of one host share its bandwidth; with offload.ratio = 0.5 each streams the host half
  // of its shard (the host keeps a master for the whole shard, written back at checkpoints).
  SuiteRun two = bench_ok("offload", "--strategies cpu_optimizer --gpus 2 --set model.dtype=bfloat16 "
                                     "--set offload.ratio=0.5", "bench_floor_mpi");
  const auto &half = row_named(two.result, "cpu_optimizer");
  const double half_bytes = half["host_update_bytes_per_step"].get<double>();
  CHECK(half_bytes == 28.0 * std::round(0.5 * double(pinned_master(half) / 4)));
  CHECK(half["floor_ms"].get<double>() ==
        Approx(1e3 * 2 * half_bytes / two.result["link_rates"]["host_bytes_per_s"].get<double>()).epsilon(1e-6));
}

// The scale suite's figures from the rows' own measurements: MFU = 6 x parameters x tokens per step
// over (step time x ranks x peak), compute = fwd + bwd less update_stall, practicality = compute /
// step, the floor.
TEST_CASE("bench scale on 2 MPI ranks: ZeRO-3 offload rows with MFU, compute share, floor, memory and start-up",
          "[bench][mpi]") {
  SuiteRun run = bench_ok("scale", "--gpus 2 --peak-tflops 1", "bench_scale_mpi");
  // The tiny GPT (hidden 32, 2 layers, MLP 128, vocab 97, 32 positions, tied head): embeddings 3104 +
  // positions 1024 + 2 x 12704 per layer + the final norm's 64.
  CHECK(run.result["parameters"].get<double>() == 29600);
  CHECK(run.result["peak_flops_per_gpu"].get<double>() == 1e12);
  for (const char *name : {"zero3_cpu_optimizer", "zero3_cpu_optimizer_auto", "zero3_zenflow"}) {
    const auto &row = row_named(run.result, name);
    INFO(name << ": " << row.dump());
    REQUIRE(row["status"] == "ok");
    nlohmann::json summary = nlohmann::json::parse(test::read_text(row["run_dir"].get<std::string>() + "/summary.json"));
    CHECK(summary["world_size"] == 2);
    CHECK(summary["plugins"]["stage"]["name"] == "zero3");
    CHECK(summary["plugins"]["offload"]["name"] == "cpu_optimizer");
    const double step = row["mean_step_ms"].get<double>(), compute = row["compute_ms"].get<double>();
    // The forward's stalls for the deferred update (update_stall, where a block waited) are not compute.
    const double stall = row["timers_ms"].value("update_stall", 0.0);
    CHECK(compute == Approx(row["fwd_ms"].get<double>() + row["bwd_ms"].get<double>() - stall));
    CHECK(row["practicality"].get<double>() == Approx(compute / step));
    const double tokens_per_step = row["tokens_per_s"].get<double>() * step / 1e3;
    CHECK(tokens_per_step > 0);
    CHECK(tokens_per_step <= 2 * 4 * 32 * (1 + 1e-6));  // 2 ranks x 4 samples x at most 32 tokens (the rate rounds)
    CHECK(row["mfu"].get<double>() == Approx(6 * 29600 * tokens_per_step / (step / 1e3 * 2 * 1e12)));
    CHECK(row["time_to_first_step_s"].get<double>() > 0);
    CHECK(row["pinned_peak_bytes"].get<uint64_t>() > 0);
    CHECK(row["estimate_pinned_bytes"].get<uint64_t>() > 0);
  }
  // The floor, as the offload suite's (offload_floor.hpp): the CPU update's bytes per step of both
  // ranks over the host's measured bandwidth, or the row's own compute (no row of this
  // suite runs without offload), whichever is longer; a CPU run has no PCIe rate.
  const double bandwidth = run.result["link_rates"]["host_bytes_per_s"].get<double>();
  CHECK(bandwidth > 1e9);
  CHECK(run.result["link_rates"]["down_bytes_per_s"].get<double>() == 0);
  for (const auto &row : run.result["rows"]) {
    INFO(row["config"]);
    const double bytes = row["host_update_bytes_per_step"].get<double>();
    CHECK(bytes > 0);
    const double floor = std::max(1e3 * 2 * bytes / bandwidth, row["compute_ms"].get<double>());
    CHECK(row["floor_ms"].get<double>() == Approx(floor).epsilon(1e-6));
    CHECK(row["step_over_floor"].get<double>() == Approx(row["mean_step_ms"].get<double>() / floor).epsilon(1e-6));
    // offload.ratio = "auto" chooses after step 1 and moves its part in the two steps after: those
    // three are its warm-up whatever --warmup-steps says (1 here), and the timed steps come after.
    const bool automatic = row["config"] == "zero3_cpu_optimizer_auto";
    CHECK(row["warmup_steps"].get<int64_t>() == (automatic ? kAutoRatioWarmup : 1));
    CHECK(row["timed_steps"] == 2);
    CHECK(row["step_times_ms"].size() == size_t(row["warmup_steps"].get<int64_t>() + 2));
    nlohmann::json summary = nlohmann::json::parse(test::read_text(row["run_dir"].get<std::string>() + "/summary.json"));
    CHECK(summary["steps"].get<int64_t>() == row["warmup_steps"].get<int64_t>() + 2 + 1);  // and the cool-down step
  }
  for (const char *text : {"floor ms", "/ floor", "the row's own compute (fwd + bwd less update_stall)",
                           "zero3_cpu_optimizer_auto: 3 (offload.ratio = \"auto\""})
    CHECK_THAT(run.outcome.output, Catch::Contains(text));
  CHECK_THAT(test::read_text(output_file(run.dir, "scale", ".csv")), Catch::Contains(",floor_ms,step_over_floor,warmup_steps,"));
  // Where auto keeps part of the update where the model computes (here a limit that holds about half
  // of the master and state), a step's bytes are those after its choice: its host share of
  // cpu_optimizer's, not the run's mean (step 1 updates the whole shard on the host).
  SuiteRun part = bench_ok("scale", "--strategies zero3_cpu_optimizer zero3_cpu_optimizer_auto "
                                    "--set run.device_memory_limit_gb=0.00065", "bench_scale_auto");
  const auto &whole = row_named(part.result, "zero3_cpu_optimizer"), &split = row_named(part.result, "zero3_cpu_optimizer_auto");
  nlohmann::json chose = nlohmann::json::parse(test::read_text(split["run_dir"].get<std::string>() + "/summary.json"));
  const double host = chose["offload_ratio"].get<double>();
  CHECK(host > 0.1);
  CHECK(host < 0.9);
  for (const char *key : {"host_update_bytes_per_step", "offload_bytes_down_per_step", "offload_bytes_up_per_step"})
    CHECK(split[key].get<double>() == Approx(host * whole[key].get<double>()).epsilon(1e-6));
  // ZenFlow chose its columns (topk auto: 0.1 on a CPU run without run.device_memory_limit_gb).
  const auto &zenflow = row_named(run.result, "zero3_zenflow");
  nlohmann::json selected = nlohmann::json::parse(test::read_text(zenflow["run_dir"].get<std::string>() + "/summary.json"));
  CHECK(selected["selected_column_fraction"].get<double>() > 0);
  CHECK(selected["selected_column_fraction"].get<double>() < 1);
  for (const char *column : {"MFU", "compute ms", "practicality", "pinned/rank", "est. pinned", "first step s",
                             "peak: 1 TFLOP/s per GPU, --peak-tflops 1"})
    CHECK_THAT(run.outcome.output, Catch::Contains(column));
  CHECK_THAT(test::read_text(output_file(run.dir, "scale", ".csv")),
             Catch::Contains(",status,mfu,compute_ms,practicality,estimate_device_bytes,estimate_pinned_bytes,"));
  CHECK(fs::exists(output_file(run.dir, "scale", ".html")));
}

TEST_CASE("bench binding on 2 ranks: unbound ranks share every core, bound ones each have their own", "[bench][mpi]") {
  SuiteRun run = bench_ok("binding", "--gpus 2", "bench_binding");
  const nlohmann::json &result = run.result;
  REQUIRE(result["rows"].size() == 6);
  for (const auto &row : result["rows"]) CHECK(row["status"] == "ok");
  // The cores each rank's CPU optimizer pinned its workers to, from the row's log: one set per rank.
  auto worker_cores = [&](const std::string &row) {
    std::stringstream log(test::read_text(row_named(result, row)["log"].get<std::string>()));
    std::vector<std::string> sets;
    const std::string marker = "worker threads pinned to cores ";
    for (std::string line; std::getline(log, line);)
      if (line.find(marker) != std::string::npos) {
        std::string rest = line.substr(line.find(marker) + marker.size());
        sets.push_back(rest.substr(0, rest.find(' ')));
      }
    return sets;
  };
  const std::vector<std::string> unbound = worker_cores("zero_offload-unbound");
  REQUIRE(unbound.size() == 2);
  CHECK(unbound[0] == unbound[1]);  // both ranks on all the cores
  for (const char *row : {"zero_offload-inside", "zero_offload-launch"}) {  // bound by zfcore, or at launch
    INFO(row);
    const std::vector<std::string> bound = worker_cores(row);
    REQUIRE(bound.size() == 2);
    CHECK(bound[0] != bound[1]);  // a core of its own each (the machine has at least 2)
    for (const std::string &cores : bound) CHECK(cores.size() < unbound[0].size());
  }
}

TEST_CASE("bench zenflow prints the reference's sweep table, rows that cannot run included", "[bench]") {
  std::string dir = test::scratch_dir("bench_zenflow");
  auto outcome = bench("zenflow --topk-ratios 0.1 --update-intervals 2 4 --overlap-steps false --pin-memory-opts 1", dir);
  INFO(outcome.output);
  for (const char *column : {"trial", "topk_ratio", "update_interval", "overlap_step", "pin_memory", "avg_step (ms)",
                             "avg_bwd (ms)", "avg_fwd (ms)", "avg_selective_optimizer_step (ms)"})
    CHECK_THAT(outcome.output, Catch::Contains(column));
  nlohmann::json result = nlohmann::json::parse(test::read_text(output_file(dir, "zenflow", ".json")));
  REQUIRE(result["rows"].size() == 2);
  for (const auto &row : result["rows"]) {
    CHECK(row["labels"]["topk_ratio"] == "0.1");
    CHECK(row["labels"]["pin_memory"] == "true");
    if (row["status"] != "ok") CHECK(!row["message"].get<std::string>().empty());
  }
  // No row ran (until ZenFlow lands): nothing to recommend, a non-zero exit.
  if (result["recommended"] == "") CHECK(outcome.exit_code == 1);
}

TEST_CASE("bench: bad flags are usage errors that name the flag", "[bench]") {
  std::string dir = test::scratch_dir("bench_usage");
  struct Case {
    std::string args, message;
  };
  for (const Case &c : {Case{"stages --stages 7", "--stages 7: expected one of 0, 1, 2, 3"},
                        Case{"stages --num-steps zero", "--num-steps zero: expected an integer >= 1"},
                        Case{"stages --trials 0", "--trials 0: expected an integer from 1 to 1000"},
                        Case{"offload --strategies nvme", "--strategies nvme needs --nvme-path"},
                        Case{"stages --topk-ratios 0.1", "--topk-ratios is not an option of `zfcore bench stages`"},
                        Case{"stages --frobnicate", "unknown option '--frobnicate'"}}) {
    auto outcome = bench(c.args, dir);
    INFO(c.args << "\n" << outcome.output);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output, Catch::Contains(c.message));
    CHECK(fs::is_empty(dir));  // nothing ran
  }
}

TEST_CASE("the recommendation: the fastest row that ran and fits, a reason for every other", "[bench]") {
  auto row = [](const std::string &name, const std::string &status, double ms, uint64_t gpu, uint64_t rss) {
    RowResult r;
    r.row.name = name;
    r.status = status;
    r.message = status == "ok" ? "" : status == "OOM" ? "CUDA out of memory" : "offload plugin 'x' not found";
    r.mean_step_ms = ms;
    r.gpu_peak = gpu;
    r.host_rss = rss;
    return r;
  };
  const uint64_t GiB = 1ull << 30;
  std::vector<RowResult> rows{row("zero0", "OOM", 0, 0, 0), row("zero1", "ok", 90, 79 * GiB, 2 * GiB),
                              row("zero2", "ok", 100, 60 * GiB, 2 * GiB), row("zero3", "ok", 120, 40 * GiB, 2 * GiB),
                              row("cpu_full", "error", 0, 0, 0), row("nvme", "ok", 80, 20 * GiB, 60 * GiB)};
  MachineLimits limits{80 * GiB, 60 * GiB};
  Recommendation rec = recommend(rows, limits, 1);
  CHECK(rec.chosen == 2);  // zero1 is faster but 79 GiB > 90% of 80; nvme is fastest but its RSS is too big
  CHECK(rec.reasons[0] == "OOM: CUDA out of memory");
  CHECK_THAT(rec.reasons[1], Catch::StartsWith("does not fit: GPU peak 79"));
  CHECK(rec.reasons[2] == "fastest that fits: 100.0 ms per step (one trial: no noise estimate; --trials 3 gives one)");
  CHECK(rec.reasons[3] == "slower: 120.0 ms vs 100.0 ms (zero2)");
  CHECK(rec.reasons[4] == "error: offload plugin 'x' not found");
  CHECK_THAT(rec.reasons[5], Catch::StartsWith("does not fit: host RSS"));
  // Two ranks on the host: each one's RSS counts twice.
  rows[5].host_rss = 40 * GiB;
  CHECK(recommend(rows, limits, 1).chosen == 5);
  CHECK(recommend(rows, limits, 2).chosen == 2);
  // Unknown limits are not checked; nothing ran: nothing chosen.
  CHECK(recommend(rows, MachineLimits{}, 1).chosen == 5);
  CHECK(recommend({rows[0], rows[4]}, limits, 1).chosen == -1);
}

namespace {

RowResult trial_row(const std::string &name, int trial, double ms, uint64_t gpu = 0, int simplicity = 0,
                    const std::string &status = "ok") {
  RowResult r;
  r.row.name = name;
  r.row.simplicity = simplicity;
  r.trial = trial;
  r.status = status;
  r.message = status == "ok" ? "" : "CUDA out of memory";
  r.mean_step_ms = ms;
  r.gpu_peak = gpu;
  return r;
}

}  // namespace

TEST_CASE("the recommendation over trials: medians, spreads, and a configuration with a failed trial is out",
          "[bench]") {
  // a: 100, 104, 102 (median 102, spread 4); b: 120, 118, 125 (median 120, spread 7): 18 ms apart,
  // more than the spreads together (11): b is slower beyond noise.
  std::vector<RowResult> rows{trial_row("a", 1, 100), trial_row("a", 2, 104), trial_row("a", 3, 102),
                              trial_row("b", 1, 120), trial_row("b", 2, 118), trial_row("b", 3, 125)};
  Recommendation rec = recommend(rows, MachineLimits{}, 1);
  CHECK(rec.chosen == 0);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(rec.picks(rows, i));
    CHECK(rec.verdicts[i] == "chosen");
    CHECK(rec.reasons[i] == "fastest that fits: median 102.0 ms (100.0-104.0 over 3 trials) per step, the others "
                            "slower beyond their trials' spread");
    CHECK(!rec.picks(rows, i + 3));
    CHECK(rec.verdicts[i + 3] == "slower");
    CHECK(rec.reasons[i + 3] == "slower: median 120.0 ms (118.0-125.0 over 3 trials) vs 102.0 ms (a), beyond the "
                                "trials' spread");
  }
  rows[1] = trial_row("a", 2, 0, 0, 0, "OOM");
  rec = recommend(rows, MachineLimits{}, 1);
  CHECK(rec.chosen == 3);
  CHECK(rec.reasons[0] == "OOM (trial 2 of 3): CUDA out of memory");
  CHECK(rec.verdicts[0] == "OOM");
  CHECK(rec.reasons[4] == "fastest that fits: median 120.0 ms (118.0-125.0 over 3 trials) per step");
  // Two trials have a mean, not a median.
  std::vector<RowResult> two{trial_row("a", 1, 100), trial_row("a", 2, 110), trial_row("b", 1, 200),
                             trial_row("b", 2, 210)};
  CHECK(recommend(two, MachineLimits{}, 1).reasons[0] ==
        "fastest that fits: mean 105.0 ms (100.0-110.0 over 2 trials) per step, the others slower beyond their trials' "
        "spread");
}

TEST_CASE("the recommendation: identical rows are within noise, then the least memory wins, then the simplest",
          "[bench]") {
  const uint64_t GiB = 1ull << 30;
  // zero0 and zero1 measured alike (the same work on one rank): the faster median is noise.
  std::vector<RowResult> rows{trial_row("zero0", 1, 2.9, GiB, 0), trial_row("zero0", 2, 2.3, GiB, 0),
                              trial_row("zero0", 3, 3.1, GiB, 0), trial_row("zero1", 1, 2.3, GiB, 1),
                              trial_row("zero1", 2, 3.0, GiB, 1), trial_row("zero1", 3, 2.4, GiB, 1)};
  Recommendation rec = recommend(rows, MachineLimits{}, 1);
  REQUIRE(rec.chosen == 0);  // zero1's median is lower, but as little memory: the simpler zero0
  CHECK(rec.verdicts[3] == "within noise");
  CHECK(rec.reasons[3] ==
        "within noise: median 2.4 ms (2.3-3.0 over 3 trials) vs 2.9 ms (zero0); as little memory, zero0 is simpler");
  CHECK(rec.reasons[0] == "chosen among the 2 within noise of the fastest (by memory, then simplicity): median 2.9 ms "
                          "(2.3-3.1 over 3 trials) per step");
  // Less memory (beyond 5%) wins over simplicity.
  for (size_t i = 3; i < 6; ++i) rows[i].gpu_peak = GiB / 2;
  rec = recommend(rows, MachineLimits{}, 1);
  CHECK(rec.chosen == 3);
  CHECK(rec.reasons[0] == "within noise: median 2.9 ms (2.3-3.1 over 3 trials) vs 2.4 ms (zero1); zero1 has less memory");
  // Within 5% the memory is the same: simplicity decides again.
  for (size_t i = 3; i < 6; ++i) rows[i].gpu_peak = GiB - GiB / 50;
  CHECK(recommend(rows, MachineLimits{}, 1).chosen == 0);
  // One trial: no noise estimate, the faster one is chosen and the verdict says so.
  std::vector<RowResult> single{trial_row("zero0", 1, 2.9, GiB, 0), trial_row("zero1", 1, 2.3, GiB, 1)};
  rec = recommend(single, MachineLimits{}, 1);
  CHECK(rec.chosen == 1);
  CHECK_THAT(rec.reasons[1], Catch::EndsWith("(one trial: no noise estimate; --trials 3 gives one)"));
  CHECK(rec.reasons[0] == "slower: 2.9 ms vs 2.3 ms (zero1)");
}

// A real run on a shared machine: whether zero0 and zero1 (the same work on one rank) come out
// within noise depends on that run's noise. The oracle is the rule applied to the rows' own times:
// within noise exactly when the medians differ by no more than the two trials' spreads together.
TEST_CASE("bench stages over 3 trials: each row's verdict follows from the trials' own step times", "[bench]") {
  SuiteRun run = bench_ok("stages", "--stages 0 1 --trials 3", "bench_noise");
  INFO(run.outcome.output);
  const nlohmann::json &rows = run.result["rows"];
  REQUIRE(rows.size() == 6);
  std::map<std::string, std::vector<double>> times;
  for (const auto &row : rows) {
    CHECK(row["status"] == "ok");
    times[row["config"].get<std::string>()].push_back(row["mean_step_ms"].get<double>());
  }
  REQUIRE(times.size() == 2);
  auto median = [](std::vector<double> t) { return std::sort(t.begin(), t.end()), t[1]; };
  auto spread = [](const std::vector<double> &t) {
    return *std::max_element(t.begin(), t.end()) - *std::min_element(t.begin(), t.end());
  };
  const std::vector<double> &t0 = times["zero0"], &t1 = times["zero1"];
  const double gap = std::abs(median(t0) - median(t1)), noise = spread(t0) + spread(t1);
  INFO("medians " << median(t0) << " and " << median(t1) << " ms, spreads together " << noise << " ms");
  const bool within = gap <= noise;
  // Away from the boundary only: the JSON carries 9 significant digits.
  if (std::abs(gap - noise) > 1e-6 * (gap + noise)) {
    const std::string faster = median(t0) <= median(t1) ? "zero0" : "zero1";
    for (const auto &row : rows) {
      const std::string config = row["config"];
      // Within noise of each other the simpler zero0 wins unless zero1 has 5% less memory.
      if (!within) CHECK(row["verdict"] == (config == faster ? "chosen" : "slower"));
      if (within) CHECK((row["verdict"] == "chosen" || row["verdict"] == "within noise"));
    }
    CHECK_THAT(run.outcome.output,
               Catch::Contains(within ? "within noise: median " : "slower: median ") &&
                   Catch::Contains(within ? "chosen among the 2 within noise" : ", beyond the trials' spread"));
  }
  int chosen = 0;
  for (const auto &row : rows) chosen += row["verdict"] == "chosen";
  CHECK(chosen == 3);  // every trial of the one chosen configuration, and no other
  CHECK_THAT(run.outcome.output, Catch::Contains("3 trials per configuration, taken in turns"));
  CHECK_THAT(run.result["noise"].get<std::string>(), Catch::StartsWith("3 trials per configuration"));
  // The trials were taken in turns: zero1's first trial ended before zero0's second.
  REQUIRE(rows[1]["trial"] == 2);
  REQUIRE(rows[3]["config"] == "zero1");
  CHECK(fs::last_write_time(rows[3]["log"].get<std::string>()) < fs::last_write_time(rows[1]["log"].get<std::string>()));
}

TEST_CASE("recommended-<suite>.toml writes numbers as a user would, and plugin lists as lists", "[bench]") {
  std::string dir = test::scratch_dir("bench_recommended_toml");
  std::string base = dir + "/base.toml";
  { std::ofstream(base) << "[optimizer]\nplugin = \"cpu_adam\"\nlr = 1e-3\n[train]\nsteps = 10\n"; }
  const std::vector<std::string> overrides{"zenflow.topk_ratio=0.1", "offload.plugin=cpu_optimizer",
                                           "stage.plugin=[zero2, zero1]", "run.name=bench", "optimizer.lr=3e-4",
                                           "zenflow.update_interval=4", "train.min_lr_ratio=0.30000000000000004"};
  std::string text = recommended_toml(base, overrides, "# chosen\n");
  INFO(text);
  for (const char *line : {"# chosen\n", "topk_ratio = 0.1\n", "lr = 0.0003\n", "plugin = [\"zero2\", \"zero1\"]\n",
                           "plugin = \"cpu_optimizer\"\n", "update_interval = 4\n", "name = \"bench\"\n", "steps = 10\n",
                           "min_lr_ratio = 0.30000000000000004\n"})
    CHECK_THAT(text, Catch::Contains(line));
  CHECK_THAT(text, !Catch::Contains("0.10000000000000001"));
  // It reads back as the same config.
  RunConfig config = RunConfig::parse(text, "recommended.toml");
  CHECK(config.string("zenflow", "topk_ratio") == "0.1");  // a number or "auto"
  CHECK(config.real("optimizer", "lr") == 3e-4);
  CHECK(config.real("train", "min_lr_ratio") == 0.1 + 0.2);
  CHECK(config.plugin(ZF_KIND_STAGE).candidates == std::vector<std::string>{"zero2", "zero1"});
}

TEST_CASE("the recommendation on a CPU counts pinned and pageable host memory together: they are one RAM",
          "[bench]") {
  const uint64_t MiB = 1ull << 20;
  // cpu_full moves the whole model to the host tier, none keeps it in the host tier too (a CPU run
  // has no device): cpu_full's pinned buffers are more of the same RAM, not memory saved.
  std::vector<RowResult> rows{trial_row("none", 1, 10.0, 0, 0), trial_row("none", 2, 10.4, 0, 0),
                              trial_row("cpu_full", 1, 10.1, 0, 1), trial_row("cpu_full", 2, 10.3, 0, 1)};
  for (size_t i = 0; i < 2; ++i) rows[i].host_ledger_peak = 100 * MiB;
  for (size_t i = 2; i < 4; ++i) rows[i].host_ledger_peak = 60 * MiB, rows[i].pinned_peak = 60 * MiB;
  Recommendation rec = recommend(rows, MachineLimits{}, 1);
  CHECK(rec.chosen == 0);  // 100 MiB against 60 + 60 = 120 MiB: none has less memory
  CHECK_THAT(rec.reasons[2], Catch::EndsWith("none has less memory"));
  // Without the pinned bytes cpu_full would have looked like the smaller one.
  for (size_t i = 2; i < 4; ++i) rows[i].pinned_peak = 0;
  CHECK(recommend(rows, MachineLimits{}, 1).chosen == 2);
}
