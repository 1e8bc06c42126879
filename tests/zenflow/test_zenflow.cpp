// ZenFlow on CPU runs, where the host stands in for the GPU: the same compact device update, the
// gradient sum, the update thread, the staging buffer and the swap run as on a GPU, so CI checks
// the whole schedule. Oracles: plain AdamW (topk_ratio = 1), cpu_optimizer and no offload
// (update_interval = 1, synchronous), a reference model of the schedule, the uninterrupted run
// (resume mid-interval), the bytes cpu_optimizer moves, and no offload's loss.
#include "checkpoint/safetensors.hpp"
#include "stages/stage_runs.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace zf;

namespace {

const std::string kWorkload =
    "--set train.steps=8 --set train.micro_batch=32 --set optimizer.plugin=cpu_adam --set optimizer.threads=1 ";
const std::string kOffload = "--set offload.plugin=cpu_optimizer --set offload.bucket_size=5000 ";
// ZenFlow on tests/gpu/tiny_gpt.toml in bf16 (a GPT with a tied head, on the GPL text).
const std::string kTinyGptZenFlow = "--set model.dtype=bfloat16 --set train.micro_batch=8 --set optimizer.plugin=cpu_adam "
                                    "--set offload.plugin=cpu_optimizer --set offload.bucket_size=20000 "
                                    "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=2 ";

std::string digest_of(const test::StageRun &r) { return test::json_field(r.summary, "param_digest"); }

test::StageRun run_ok(const std::string &name, const std::string &stage, int world, const std::string &extra,
                      const std::string &config = test::source_dir() + "/examples/linear_stack.toml") {
  test::StageRun r = test::run_stage(name, stage, world, extra, config);
  INFO(name << "\n" << r.outcome.output);
  REQUIRE(r.outcome.exit_code == 0);
  return r;
}

// The "update" field of each line of steps.jsonl.
std::vector<std::string> update_events(const std::string &dir) {
  std::vector<std::string> out;
  std::istringstream lines(test::read_text(dir + "/steps.jsonl"));
  for (std::string line; std::getline(lines, line);) out.push_back(test::json_field(line, "update"));
  return out;
}

std::string joined(const std::vector<std::string> &events) {
  std::string out;
  for (const std::string &e : events) out += (out.empty() ? "" : ",") + e;
  return out;
}

// The deepspeed schedule as docs/zenflow.md defines it, written independently of the engine.
std::vector<std::string> deepspeed_schedule(int steps, int warm_up, int interval, int select_interval, bool overlap) {
  std::vector<std::string> out;
  bool selected = false, swap_due = false;
  int summed = 0, last_selection = 0;
  for (int t = 1; t <= steps; ++t) {
    if (t <= warm_up) {
      out.push_back("cpu");
      continue;
    }
    std::vector<std::string> events;
    if (!selected || (summed == 0 && t - last_selection >= select_interval)) {
      if (swap_due) events.push_back("swap");
      swap_due = false;
      events.push_back("select");
      selected = true;
      last_selection = t;
    }
    events.push_back("gpu");
    if (++summed == interval) {
      if (swap_due) events.push_back("swap");
      events.push_back("cpu");
      summed = 0;
      swap_due = overlap;
      if (!overlap) events.push_back("swap");
    }
    out.push_back(joined(events));
  }
  return out;
}

// The staggered schedule: the shard in `groups` groups, one handed to the CPU per step and swapped
// in at the next (overlap) or at once; before a selection every group with gradients is flushed
// (handed over and swapped in at once). cpu_updates counts the CPU updates with the run's end,
// which flushes too.
struct Staggered {
  std::vector<std::string> events;
  int cpu_updates = 0;
};
Staggered staggered_schedule(int steps, int warm_up, int groups, int select_interval, bool overlap) {
  Staggered out;
  bool selected = false, swap_due = false;
  int last_selection = 0, next = 0;
  std::vector<int> summed(size_t(groups), 0);
  for (int t = 1; t <= steps; ++t) {
    if (t <= warm_up) {
      out.events.push_back("cpu");
      ++out.cpu_updates;
      continue;
    }
    std::vector<std::string> events;
    if (swap_due) events.push_back("swap");
    swap_due = false;
    if (!selected || t - last_selection >= select_interval) {
      for (int &s : summed) {
        if (s == 0) continue;
        events.insert(events.end(), {"cpu", "swap"});
        ++out.cpu_updates;
        s = 0;
      }
      events.push_back("select");
      selected = true;
      last_selection = t;
    }
    events.push_back("gpu");
    for (int &s : summed) ++s;
    summed[size_t(next)] = 0;
    next = (next + 1) % groups;
    events.push_back("cpu");
    ++out.cpu_updates;
    swap_due = overlap;
    if (!overlap) events.push_back("swap");
    out.events.push_back(joined(events));
  }
  for (int s : summed) out.cpu_updates += s > 0;
  return out;
}

}  // namespace

TEST_CASE("ZenFlow with topk_ratio = 1 is plain AdamW: no offload's param_digest", "[zenflow][mpi]") {
  // 260 steps on one rank: the device update's step counter (bias correction) counts past 256.
  for (const auto &[stage, world] : std::vector<std::pair<std::string, int>>{{"zero0", 1}, {"zero2", 2}}) {
    std::string extra = kWorkload + (world == 1 ? "--set train.steps=260 " : "");
    test::StageRun none = run_ok("zf_all_none_" + stage, stage, world, extra);
    test::StageRun zen = run_ok("zf_all_zen_" + stage, stage, world,
                                extra + kOffload + "--set zenflow.topk_ratio=1 --set zenflow.update_interval=3");
    INFO(stage << " on " << world << " ranks\n" << zen.outcome.output);
    CHECK(digest_of(zen) == digest_of(none));
    CHECK(test::json_field(zen.summary, "selected_column_fraction") == "1");
  }
}

TEST_CASE("ZenFlow with update_interval = 1 and overlap_step = false is cpu_optimizer and no offload",
          "[zenflow][mpi]") {
  const std::string zen = "--set zenflow.topk_ratio=0.25 --set zenflow.update_interval=1 "
                          "--set zenflow.overlap_step=false --set zenflow.select_strategy=step "
                          "--set zenflow.select_interval=1000 ";
  for (const auto &[stage, world] :
       std::vector<std::pair<std::string, int>>{{"zero0", 1}, {"zero1", 2}, {"zero3", 3}}) {
    // Gradient accumulation on one rank: the micro-steps' sum, scaled once.
    std::string extra = kWorkload + (stage == "zero3" ? "--set stage.param_persistence_threshold=1000 " : "") +
                        (world == 1 ? "--set train.grad_accum=2 " : "");
    test::StageRun none = run_ok("zf_u1_none_" + stage, stage, world, extra);
    test::StageRun offload = run_ok("zf_u1_off_" + stage, stage, world, extra + kOffload);
    test::StageRun zenflow = run_ok("zf_u1_zen_" + stage, stage, world, extra + kOffload + zen);
    INFO(stage << " on " << world << " ranks\n" << zenflow.outcome.output);
    CHECK(digest_of(offload) == digest_of(none));
    CHECK(digest_of(zenflow) == digest_of(none));
    CHECK(test::json_field(zenflow.summary, "selected_column_fraction") == "0.25");
    CHECK(test::json_number(zenflow.summary, "zenflow_cpu_lr_scale") == 1);  // "auto" from scratch
    if (world == 1) {  // pin_memory = false means nothing without a GPU: the same run (the bench sweeps it)
      test::StageRun unpinned = run_ok("zf_u1_unpinned", stage, world, extra + kOffload + zen +
                                       "--set offload.pin_memory=false");
      CHECK(digest_of(unpinned) == digest_of(none));
      // Warm-up rounds count in the device's bias correction; both schedules are the same at U 1.
      test::StageRun warm = run_ok("zf_u1_warm", stage, world, extra + kOffload + zen +
                                   "--set zenflow.full_warm_up_rounds=3");
      CHECK(digest_of(warm) == digest_of(none));
      test::StageRun deepspeed = run_ok("zf_u1_deepspeed", stage, world, extra + kOffload + zen +
                                        "--set zenflow.full_warm_up_rounds=3 --set zenflow.schedule=deepspeed");
      CHECK(digest_of(deepspeed) == digest_of(none));
    }
  }
}

TEST_CASE("ZenFlow's schedules match reference models of them, with overlap and without", "[zenflow]") {
  const int steps = 14, warm_up = 2, interval = 3, select_interval = 6;
  for (bool overlap : {true, false}) {
    std::string extra = kWorkload + kOffload + "--set train.steps=" + std::to_string(steps) +
                        " --set zenflow.full_warm_up_rounds=2 --set zenflow.update_interval=3 "
                        "--set zenflow.select_strategy=step --set zenflow.select_interval=6 "
                        "--set zenflow.overlap_step=" + (overlap ? "true" : "false");
    test::StageRun a = run_ok("zf_sched_a", "zero0", 1, extra + " --set zenflow.schedule=deepspeed");
    test::StageRun b = run_ok("zf_sched_b", "zero0", 1, extra + " --set zenflow.schedule=deepspeed");
    INFO("overlap " << overlap << "\n" << a.outcome.output);
    CHECK(update_events(a.dir) == deepspeed_schedule(steps, warm_up, interval, select_interval, overlap));
    CHECK(digest_of(a) == digest_of(b));  // deterministic: one interval of staleness, always the same
    // Warm-up rounds, one CPU update per interval (and one for a last partial interval).
    CHECK(test::json_number(a.summary, "zenflow_cpu_updates") == warm_up + (steps - warm_up + interval - 1) / interval);
    CHECK(test::json_number(a.summary, "zenflow_selections") == 2);

    // staggered, the default, uncorrected as the model is (age_gate, the default correction, drops the
    // gradient taken before a group's swap: a group with no other gradient then has no CPU update).
    const std::string uncorrected = extra + " --set zenflow.correction=none";
    test::StageRun c = run_ok("zf_sched_c", "zero0", 1, uncorrected);
    test::StageRun d = run_ok("zf_sched_d", "zero0", 1, uncorrected);
    Staggered expected = staggered_schedule(steps, warm_up, interval, select_interval, overlap);
    CHECK(update_events(c.dir) == expected.events);
    CHECK(digest_of(c) == digest_of(d));
    CHECK(test::json_number(c.summary, "zenflow_cpu_updates") == expected.cpu_updates);
    CHECK(test::json_number(c.summary, "zenflow_selections") == 2);
    for (const char *timer : {"selective_optimizer_update", "selective_optimizer_process", "selective_optimizer_step",
                              "selective_optimizer_sync", "cpu_update"})
      CHECK_FALSE(test::json_field(a.summary, timer).empty());
  }
}

// zenflow.correction defaults to "auto": age_gate under the staggered schedule (the correction that
// reached AdamW's loss soonest on three text pairs, docs/zenflow.md), none under the deepspeed one,
// which refuses a correction named.
TEST_CASE("ZenFlow without zenflow.correction runs age_gate under the staggered schedule, none under the deepspeed one",
          "[zenflow]") {
  const std::string base = kWorkload + kOffload + "--set zenflow.update_interval=3 --set zenflow.topk_ratio=0.3 ";
  const std::string unset = digest_of(run_ok("zf_default_staggered", "zero0", 1, base));
  CHECK(unset == digest_of(run_ok("zf_default_age_gate", "zero0", 1, base + "--set zenflow.correction=age_gate")));
  CHECK(unset == digest_of(run_ok("zf_default_auto", "zero0", 1, base + "--set zenflow.correction=auto")));
  CHECK(unset != digest_of(run_ok("zf_default_none", "zero0", 1, base + "--set zenflow.correction=none")));
  // correction_factor "auto" for age_gate is 0: the stale gradient dropped.
  CHECK(unset == digest_of(run_ok("zf_default_factor", "zero0", 1, base + "--set zenflow.correction_factor=0")));

  const std::string deepspeed = base + "--set zenflow.schedule=deepspeed ";
  const std::string uncorrected = digest_of(run_ok("zf_default_deepspeed", "zero0", 1, deepspeed));
  CHECK(uncorrected ==
        digest_of(run_ok("zf_default_deepspeed_none", "zero0", 1, deepspeed + "--set zenflow.correction=none")));
  test::StageRun named =
      test::run_stage("zf_default_deepspeed_named", "zero0", 1, deepspeed + "--set zenflow.correction=age_gate");
  INFO(named.outcome.output);
  CHECK(named.outcome.exit_code != 0);
  CHECK_THAT(named.outcome.output, Catch::Contains("zenflow.correction = \"age_gate\" corrects the staggered schedule's "
                                                   "one step of delay; it needs zenflow.schedule = \"staggered\""));
}

TEST_CASE("ZenFlow moves each gradient byte down once per interval and keeps 16 bytes per parameter on the host",
          "[zenflow]") {
  test::StageRun offload = run_ok("zf_bytes_off", "zero0", 1, kWorkload + kOffload);
  test::StageRun zen = run_ok("zf_bytes_zen", "zero0", 1,
                              kWorkload + kOffload + "--set zenflow.update_interval=4 --set zenflow.schedule=deepspeed");
  CHECK(test::json_number(zen.summary, "zenflow_cpu_updates") == 2);  // 8 steps
  // Staggered: a quarter of the shard per step, the same bytes in steady state (8 more steps).
  test::StageRun short_run = run_ok("zf_bytes_stag8", "zero0", 1, kWorkload + kOffload + "--set zenflow.update_interval=4");
  test::StageRun long_run = run_ok("zf_bytes_stag16", "zero0", 1,
                                   kWorkload + kOffload + "--set zenflow.update_interval=4 --set train.steps=16");
  for (const char *key : {"offload_bytes_down", "offload_bytes_up"})
    CHECK((test::json_number(long_run.summary, key) - test::json_number(short_run.summary, key)) * 4 == test::json_number(offload.summary, key));
  CHECK(test::json_number(zen.summary, "offload_bytes_down") * 4 == test::json_number(offload.summary, "offload_bytes_down"));
  CHECK(test::json_number(zen.summary, "offload_bytes_up") * 4 == test::json_number(offload.summary, "offload_bytes_up"));
  // Pinned host memory: fp32 master, two moments and the gradient buffer (fp32 run) = 16 B/param,
  // exactly what cpu_optimizer holds (no second moment chain, no second gradient buffer).
  CHECK(test::json_number(zen.summary, "planned_pinned_bytes") == test::json_number(offload.summary, "planned_pinned_bytes"));
  CHECK(test::json_number(zen.summary, "pinned") == test::json_number(zen.summary, "planned_pinned_bytes"));
}

// At most one CPU update is in flight, and the staggered schedule's covers one group: its staging buffer
// holds the largest group (at 32B on 4 ranks with update_interval 4, 3.8 GiB of a shard's 15.3 GiB).
TEST_CASE("ZenFlow's staggered schedule plans and holds a staging buffer of its largest group and not of the shard",
          "[zenflow]") {
  // linear_stack (hidden 256, 4 layers) on one rank: 4 x (256 x 256 + 256) fp32 elements, a multiple of 64.
  const uint64_t shard = 4 * (256 * 256 + 256), bucket = 5000, groups = 4;
  // The groups (docs/zenflow.md): update_interval parts of about equal size, cut on the bucket grid.
  uint64_t largest = 0, begin = 0;
  for (uint64_t k = 0; k < groups; ++k) {
    const uint64_t end = k + 1 == groups ? shard : shard * (k + 1) / groups / bucket * bucket;
    largest = std::max(largest, end - begin);
    begin = end;
  }
  REQUIRE(largest == 68168);  // 65,000 x 3, then the rest
  const std::string base = kWorkload + kOffload + "--set zenflow.update_interval=4 --set zenflow.topk_ratio=0.3 ";
  test::StageRun staggered = run_ok("zf_staging_staggered", "zero0", 1, base);
  test::StageRun deepspeed = run_ok("zf_staging_deepspeed", "zero0", 1, base + "--set zenflow.schedule=deepspeed ");
  CHECK(test::ledger_bytes(staggered.summary, "memory_peak_bytes", "host.zenflow.staging") == 4 * largest);
  CHECK(test::ledger_bytes(deepspeed.summary, "memory_peak_bytes", "host.zenflow.staging") == 4 * shard);
  // The plan the run checks before step 1 (and the refusal's parts) counts the same bytes, and so does
  // zfcore estimate.
  CHECK(test::json_number(deepspeed.summary, "planned_host_bytes") -
            test::json_number(staggered.summary, "planned_host_bytes") == double(4 * (shard - largest)));
  const std::string estimate =
      test::zfcore() + " estimate --bytes " + test::source_dir() + "/examples/linear_stack.toml " + base;
  test::Outcome said = test::run_command(estimate);
  INFO(said.output);
  CHECK_THAT(said.output, Catch::Contains("staging 266.3 KiB (" + std::to_string(4 * largest) +
                                          " bytes: the largest of 4 groups)"));
  said = test::run_command(estimate + "--set zenflow.schedule=deepspeed");
  CHECK_THAT(said.output, Catch::Contains("(" + std::to_string(4 * shard) + " bytes: the shard)"));
}

// The bytes of the selected columns' compact copies that a rank's ledger holds (zenflow.*, less the
// gradient sum, the staging and lookahead's last CPU results): index, fp32 master, optimizer state.
uint64_t selected_ledger_bytes(const test::StageRun &r) {
  uint64_t bytes = 0;
  for (const char *tag : {"index", "master", "exp_avg", "exp_avg_sq", "params_out"})
    bytes += test::ledger_bytes(r.summary, "memory_peak_bytes", std::string("host.zenflow.") + tag);
  return bytes;
}

// zfcore estimate, the memory plan before step 1 and the run count the selected columns alike: the
// topk selectors' ceil(topk x cols) columns of each weight and every 1-D parameter. linear_stack
// (4 layers of a 256 x 256 weight and a bias, fp32): at topk 0.3 77 columns of each weight, at 0.1
// 26; an element holds an index (8), its fp32 master (4) and Adam's two moments (8), and while its
// update runs its gathered gradient (4). On 2 ranks under zero2 each shard holds two whole layers.
TEST_CASE("zfcore estimate and the memory plan count ZenFlow's selected columns as the run holds them",
          "[zenflow][mpi]") {
  const uint64_t wide = 4 * (77 * 256 + 256), narrow = 4 * (26 * 256 + 256);
  const std::string base = kWorkload + kOffload + "--set zenflow.update_interval=4 ";
  test::StageRun at3 = run_ok("zf_selected_03", "zero0", 1, base + "--set zenflow.topk_ratio=0.3");
  test::StageRun at1 = run_ok("zf_selected_01", "zero0", 1, base + "--set zenflow.topk_ratio=0.1");
  CHECK(selected_ledger_bytes(at3) == 20 * wide);
  CHECK(selected_ledger_bytes(at1) == 20 * narrow);
  CHECK(test::json_number(at3.summary, "planned_host_bytes") - test::json_number(at1.summary, "planned_host_bytes") ==
        double(24 * (wide - narrow)));
  const std::string estimate = test::zfcore() + " estimate " + test::source_dir() + "/examples/linear_stack.toml " + base;
  test::Outcome said = test::run_command(estimate + "--set zenflow.topk_ratio=0.3");
  INFO(said.output);
  CHECK_THAT(said.output, Catch::Contains("topk_ratio 0.3; rank 0 holds the most, " +
                                          std::to_string(wide) + " elements (" + std::to_string(20 * wide) + " bytes"));

  test::StageRun two = run_ok("zf_selected_zero2", "zero2", 2, base + "--set zenflow.topk_ratio=0.3");
  CHECK(selected_ledger_bytes(two) == 20 * wide / 2);
  said = test::run_command(estimate + "--set zenflow.topk_ratio=0.3 --set stage.plugin=zero2 --world 2");
  CHECK_THAT(said.output, Catch::Contains("rank 0 holds the most, " + std::to_string(wide / 2) + " elements (" +
                                          std::to_string(20 * wide / 2) + " bytes"));

  // topk_ratio = "auto" under a limit that holds about half of the columns: the estimate makes the
  // run's choice (what the first step's peak and a tenth leave), to the digits it prints.
  const std::string limited = "--set zenflow.topk_ratio=auto --set run.device_memory_limit_gb=0.0072 ";
  test::StageRun automatic = run_ok("zf_selected_auto", "zero0", 1, base + limited);
  const double chosen = test::json_number(automatic.summary, "zenflow_topk_ratio");
  CHECK(chosen > 0.1);
  CHECK(chosen < 0.9);
  said = test::run_command(estimate + limited);
  char expected[64];
  std::snprintf(expected, sizeof expected, "topk_ratio auto: about %.4g (", chosen);
  CHECK_THAT(said.output, Catch::Contains(expected));
}

TEST_CASE("a ZenFlow run resumed mid-interval repeats the uninterrupted run bit for bit", "[zenflow][mpi]") {
  for (const auto &[stage, world] : std::vector<std::pair<std::string, int>>{{"zero0", 1}, {"zero2", 2}}) {
    for (const std::string schedule : {"staggered", "deepspeed"}) {
      // deepspeed: intervals end at steps 3 and 6, the checkpoint at 4 falls inside one with a CPU
      // update waiting to be swapped in; staggered: one is always waiting. The first run ends at
      // step 5 (its last checkpoint holds a finished run); the second resumes from step 4.
      std::string base = kWorkload + kOffload + "--set zenflow.update_interval=3 --set zenflow.topk_ratio=0.3 " +
                         "--set checkpoint.every=4 --set zenflow.schedule=" + schedule + " ";
      test::StageRun whole = run_ok("zf_whole_" + stage + schedule, stage, world, base + "--set train.steps=8");
      test::ResumedRun r = test::run_resumed("zf_resume_" + stage + schedule, stage, world, base, 5, 8,
                                             test::default_stage_config(), /*resume_step=*/4);
      INFO(schedule);
      test::require_resumed(r);
      CHECK(digest_of(r.resumed) == digest_of(whole));
    }
  }
}

// In bf16 the device's columns of a group swapped in come from the device update's compute-precision
// output. A resumed run's first step swaps the waiting group in before any device update: that output
// must then hold the selected columns' master already (it held uninitialised memory, and the run went
// on from zeros on a CPU and stopped on NaN gradients on a GPU).
TEST_CASE("a bf16 ZenFlow run whose first step after a resume swaps a group in repeats the uninterrupted run",
          "[zenflow][checkpoint]") {
  const std::string tiny_gpt = test::source_dir() + "/tests/gpu/tiny_gpt.toml";
  const std::string base = kTinyGptZenFlow + "--set train.lr_schedule=constant --set zenflow.select_strategy=step "
                                             "--set zenflow.select_interval=1 --set zenflow.correction=none ";
  test::StageRun whole = run_ok("zf_bf16_whole", "zero2", 1, base + "--set train.steps=6", tiny_gpt);
  test::StageRun first = run_ok("zf_bf16_first", "zero2", 1,
                                base + "--set train.steps=3 --set checkpoint.every=1 --set checkpoint.keep=3", tiny_gpt);
  test::StageRun resumed = run_ok("zf_bf16_resumed", "zero2", 1,
                                  base + "--set train.steps=6 --set checkpoint.resume=" + first.dir +
                                      "/checkpoints/step-00000002", tiny_gpt);
  CHECK(update_events(resumed.dir).front().rfind("swap,", 0) == 0);  // step 3 starts with a swap
  CHECK(test::step_losses(resumed.dir).at(6) == test::step_losses(whole.dir).at(6));
  CHECK(digest_of(resumed) == digest_of(whole));
}

// A run that stops on an error (here a NaN loss at step 2) while ZenFlow's CPU update runs: the update
// thread ends before what it reads is freed, and the run exits with the error. Before, most such
// runs ended on a segmentation fault (the thread updated a bucket of a job already freed).
TEST_CASE("a ZenFlow run that stops on an error while its CPU update runs exits with the error, not a crash",
          "[zenflow]") {
  const std::string tiny_gpt = test::source_dir() + "/tests/gpu/tiny_gpt.toml";
  const std::string diverging = kTinyGptZenFlow + "--set optimizer.lr=1e6 --set train.clip_grad_norm=0 --set train.steps=8 ";
  for (int trial = 0; trial < 4; ++trial) {
    test::StageRun r = test::run_stage("zf_stops_" + std::to_string(trial), "zero2", 1, diverging, tiny_gpt);
    INFO(r.outcome.output);
    CHECK(r.outcome.exit_code == 1);
    CHECK_THAT(r.outcome.output, Catch::Contains("error: step 2: the loss is nan"));
  }
}

// A zfcore before the staggered schedule's staging held one group saved zenflow.staging over the whole shard,
// the waiting result at its group's elements. Such a checkpoint (made here from a new one: the waiting result
// moved to its group's place, every other element 7) resumes as the uninterrupted run.
TEST_CASE("a staggered ZenFlow checkpoint with the whole shard's staging (older zfcore) resumes bit for bit",
          "[zenflow][checkpoint]") {
  const std::string base = kWorkload + kOffload + "--set zenflow.update_interval=3 --set zenflow.topk_ratio=0.3 " +
                           "--set checkpoint.every=4 ";
  test::StageRun whole = run_ok("zf_older_whole", "zero0", 1, base + "--set train.steps=8");
  test::StageRun first = run_ok("zf_older_first", "zero0", 1, base + "--set train.steps=5");
  const std::string from = first.dir + "/checkpoints/step-00000004", file = from + "/rank-00000.safetensors";
  {
    const SafetensorsFile stored = SafetensorsFile::open(file);
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const std::string &name : stored.names()) tensors.emplace_back(name, stored.load(name));
    const at::Tensor groups = stored.load("optimizer.zenflow.groups"), bounds = stored.load("optimizer.zenflow.group_bounds");
    const int64_t count = bounds.numel() - 1, waiting = groups.data_ptr<int64_t>()[2 * count + 1];
    REQUIRE(waiting >= 0);  // the staggered schedule always has one result waiting
    const int64_t begin = bounds.data_ptr<int64_t>()[waiting], end = bounds.data_ptr<int64_t>()[waiting + 1];
    for (auto &[name, tensor] : tensors) {
      if (name != "optimizer.zenflow.staging") continue;
      REQUIRE(tensor.numel() < bounds.data_ptr<int64_t>()[count]);  // a group's, not the shard's
      at::Tensor shard = tensor.new_full({bounds.data_ptr<int64_t>()[count]}, 7.0);
      shard.narrow(0, begin, end - begin).copy_(tensor.narrow(0, 0, end - begin));
      tensor = shard;
    }
    std::map<std::string, std::string> metadata;
    for (const auto &[key, value] : stored.metadata())
      if (key.rfind("checksum.", 0) != 0 && key.rfind("checksum_blocks.", 0) != 0)
        metadata[key] = value;  // the write records the tensors' new checksums
    write_safetensors(file, tensors, metadata, {}, /*block_checksums=*/true);
  }
  test::StageRun resumed = run_ok("zf_older_resumed", "zero0", 1, base + "--set train.steps=8 --set checkpoint.resume=" + from);
  CHECK_THAT(resumed.outcome.output, Catch::Contains("resumed from"));
  CHECK(digest_of(resumed) == digest_of(whole));
}

TEST_CASE("zen-auto calls the CPU update on its own, and the run learns", "[zenflow]") {
  test::StageRun r = run_ok("zf_auto", "zero0", 1,
                            kWorkload + kOffload +
                                "--set train.steps=40 --set zenflow.update_interval=auto --set zenflow.schedule=deepspeed");
  double updates = test::json_number(r.summary, "zenflow_cpu_updates");
  CHECK(updates >= 2);
  CHECK(updates <= 40);
  CHECK(test::json_number(r.summary, "final_loss") < test::json_number(r.summary, "initial_loss"));
}

TEST_CASE("ZenFlow fine-tunes like no offload: the quickstart model's loss within 2%", "[zenflow][slow]") {
  // ZenFlow's use: fine-tuning a trained model (from scratch at a high learning rate, the columns
  // the CPU updates once per interval, one interval late, fall behind). Pretrain, export, then
  // fine-tune the export with and without ZenFlow.
  const std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  const std::string common = "--set train.eval_every=0 --set sample.tokens=0 --set optimizer.plugin=cpu_adam ";
  const std::string pretrained = test::scratch_dir("zf_pretrained") + "/hf";
  run_ok("zf_pretrain", "zero0", 1, common + "--set train.steps=150 --set checkpoint.export_hf=" + pretrained, quickstart);
  const std::string finetune = common + "--set model.init_from=" + pretrained +
                               " --set train.steps=60 --set optimizer.lr=3e-4 --set train.warmup_steps=0 "
                               "--set train.lr_schedule=constant --set run.seed=7 ";
  test::StageRun none = run_ok("zf_learn_none", "zero0", 1, finetune, quickstart);
  test::StageRun zen = run_ok("zf_learn_zen", "zero0", 1,
                              finetune + "--set offload.plugin=cpu_optimizer --set zenflow.topk_ratio=0.1 "
                                         "--set zenflow.update_interval=4",
                              quickstart);
  double reference = test::json_number(none.summary, "final_loss"), zenflow = test::json_number(zen.summary, "final_loss");
  INFO("no offload " << reference << ", ZenFlow " << zenflow);
  CHECK(test::json_number(zen.summary, "zenflow_cpu_lr_scale") == 4);  // "auto" when fine-tuning: update_interval
  CHECK_THAT(zen.outcome.output, !Catch::Contains("[zenflow] from scratch"));  // the advice is for pretraining
  CHECK(zenflow < test::json_number(zen.summary, "initial_loss"));
  CHECK(std::abs(zenflow - reference) <= 0.02 * reference);
}

TEST_CASE("ZenFlow from scratch learns near AdamW, and the staggered schedule beats the deepspeed one", "[zenflow][slow]") {
  // The quickstart from scratch (200 steps at lr 3e-3, cosine), held-out loss at the end. Measured
  // when written, uncorrected (before age_gate was the default): AdamW 2.368, staggered 2.469 (1.043),
  // deepspeed 2.583 (1.091); at 300 steps
  // 2.302, 2.430 (1.055), 2.636 (1.145). A change that makes ZenFlow learn less per step fails.
  const std::string quickstart = test::source_dir() + "/examples/quickstart.toml";
  const std::string common =
      "--set sample.tokens=0 --set optimizer.plugin=cpu_adam --set train.steps=200 --set train.eval_every=200 ";
  const std::string zen = common + "--set offload.plugin=cpu_optimizer --set zenflow.topk_ratio=0.1 "
                                   "--set zenflow.update_interval=4 ";
  double adamw = test::json_number(run_ok("zf_scratch_adamw", "zero0", 1, common, quickstart).summary, "eval_loss");
  const test::StageRun staggered_run = run_ok("zf_scratch_staggered", "zero0", 1, zen, quickstart);
  double staggered = test::json_number(staggered_run.summary, "eval_loss");
  // Whoever pretrains with a fraction of the columns hears what it costs, and what to use instead.
  CHECK_THAT(staggered_run.outcome.output,
             Catch::Contains("[zenflow] from scratch (no model.init_from) at topk_ratio 0.1: the other 90% of the "
                             "columns take one CPU step per interval") &&
                 Catch::Contains("keep every column where the model computes"));
  double deepspeed = test::json_number(
      run_ok("zf_scratch_deepspeed", "zero0", 1, zen + "--set zenflow.schedule=deepspeed", quickstart).summary,
      "eval_loss");
  INFO("held-out loss: AdamW " << adamw << ", staggered " << staggered << ", deepspeed " << deepspeed);
  CHECK(staggered <= 1.07 * adamw);
  CHECK(staggered < deepspeed);
}

TEST_CASE("ZenFlow settings that make no sense are located errors", "[zenflow]") {
  struct Case {
    std::string set, message;
  };
  const std::vector<Case> cases = {
      {kOffload + "--set zenflow.topk_ratio=0", "zenflow.topk_ratio = \"0\": expected a fraction in (0, 1]"},
      {kOffload + "--set zenflow.topk_ratio=most", "zenflow.topk_ratio = \"most\": expected a fraction in (0, 1] or \"auto\""},
      {kOffload + "--set run.device_memory_limit_gb=-1", "run.device_memory_limit_gb"},
      {kOffload + "--set zenflow.update_interval=sometimes",
       "zenflow.update_interval = \"sometimes\": expected an integer >= 1 or \"auto\""},
      {kOffload + "--set zenflow.update_interval=0", "expected an integer >= 1 or \"auto\""},
      {kOffload + "--set zenflow.select_strategy=step --set zenflow.select_interval=2 --set zenflow.update_interval=4 "
                  "--set zenflow.schedule=deepspeed",
       "zenflow.select_interval = 2 steps is shorter than update_interval = 4"},
      {kOffload + "--set zenflow.update_interval=auto", "which needs zenflow.schedule = \"deepspeed\""},
      {kOffload + "--set zenflow.schedule=weekly", "zenflow.schedule"},
      {kOffload + "--set zenflow.cpu_lr_scale=0", "zenflow.cpu_lr_scale = \"0\": expected a number > 0"},
      {kOffload + "--set zenflow.cpu_lr_scale=fast", "zenflow.cpu_lr_scale = \"fast\": expected a number > 0"},
      {kOffload + "--set zenflow.correction=lookahead --set zenflow.schedule=deepspeed",
       "zenflow.correction = \"lookahead\" corrects the staggered schedule's one step of delay"},
      {kOffload + "--set zenflow.correction=age_gate --set zenflow.correction_factor=2",
       "zenflow.correction_factor = \"2\": expected the stale gradient's weight, in [0, 1]"},
      {kOffload + "--set zenflow.select_interval=5", "needs select_strategy = \"step\" or \"epoch\""},
      {kOffload + "--set zenflow.offload_selected_state=true", "zenflow.offload_selected_state = true is not supported"},
      {"--set zenflow.topk_ratio=0.1", "it needs an offload plugin that keeps the master weights in host memory"},
      {kOffload + "--set zenflow.topk_ratio=0.1 --set model.column_major=false", "model.column_major = false"},
  };
  for (const Case &c : cases) {
    test::StageRun r = test::run_stage("zf_bad", "zero0", 1, kWorkload + c.set);
    INFO(c.set << "\n" << r.outcome.output);
    CHECK(r.outcome.exit_code != 0);
    CHECK(r.outcome.output.find(c.message) != std::string::npos);
    CHECK(r.outcome.output.find("terminate") == std::string::npos);
  }
  // zfcore validate finds the same before anything runs.
  const std::string validate = test::zfcore() + " validate " + test::source_dir() + "/examples/linear_stack.toml ";
  test::Outcome bad = test::run_command(validate + "--set zenflow.update_interval=sometimes");
  CHECK(bad.exit_code != 0);
  CHECK(bad.output.find("zenflow.update_interval = \"sometimes\"") != std::string::npos);
  test::Outcome good =
      test::run_command(validate + kOffload + "--set optimizer.plugin=cpu_adam --set zenflow.update_interval=auto "
                        "--set zenflow.schedule=deepspeed");
  INFO(good.output);
  CHECK(good.exit_code == 0);
  CHECK(good.output.find("zenflow") != std::string::npos);
}
