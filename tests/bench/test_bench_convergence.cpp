// `zfcore bench convergence`: the quickstart's model and text on CPU under three rows (AdamW,
// ZenFlow, a row with a bad key): each ok row's held-out loss curve at the expected steps, its
// training time read back from the run's own steps.jsonl, the ratio to the first row, the time and
// steps to the target, the error row as a row, the outputs. And the figures and the recommendation
// of recorded rows (targets given or not, rows that never reach it, trials).
#include "bench/suite.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// The one file of dir named convergence_<time><ext>.
std::string convergence_file(const std::string &dir, const std::string &ext) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind("convergence_", 0) == 0 && entry.path().extension() == ext)
      found.push_back(entry.path().string());
  REQUIRE(found.size() == 1);
  return found[0];
}

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// The markup of <svg class="chart" data-chart="id">...</svg>.
std::string chart(const std::string &html, const std::string &id) {
  size_t begin = html.find("<svg class=\"chart\" data-chart=\"" + id + "\"");
  if (begin == std::string::npos) return "";
  return html.substr(begin, html.find("</svg>", begin) + 6 - begin);
}

// The training seconds up to each step, summed from a run's steps.jsonl (the oracle of train_s).
std::map<int64_t, double> seconds_by_step(const std::string &run_dir) {
  std::map<int64_t, double> seconds;
  std::stringstream lines(test::read_text(run_dir + "/steps.jsonl"));
  double total_ms = 0;
  for (std::string line; std::getline(lines, line);) {
    nlohmann::json step = nlohmann::json::parse(line);
    total_ms += step["step_ms"].get<double>();
    seconds[step["step"].get<int64_t>()] = total_ms / 1000;
  }
  return seconds;
}

RowResult recorded(const std::string &name, const std::string &status, std::vector<double> losses, int trial = 1) {
  RowResult r;
  r.row.name = name;
  r.trial = trial;
  r.status = status;
  r.message = status == "ok" ? "" : status == "OOM" ? "CUDA out of memory" : "unknown key 'frobnicate'";
  if (status != "ok") return r;
  for (size_t i = 0; i < losses.size(); ++i) r.evals.push_back({int64_t(10 * (i + 1)), losses[i], 0.5 * double(i + 1)});
  return r;
}

}  // namespace

TEST_CASE("bench convergence on CPU: held-out curves, ratio, time to target, and a bad row as an error row",
          "[bench]") {
  std::string dir = test::scratch_dir("bench_convergence");
  // 45 steps, evaluated every 10: at 10, 20, 30, 40 and the last step, 45.
  auto outcome = test::run_command(
      "timeout 300 " + test::zfcore() + " bench convergence --device cpu --model " + test::source_dir() +
      "/examples/quickstart.toml --rows none zenflow bad:none,zenflow.no_such_key=1 --num-steps 45 --eval-every 10 " +
      "--batch-size 8 --seq-length 64 --warmup-steps 1 --set run.threads=1 --output-dir " + dir);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  for (const char *text : {"held-out loss", "/ first", "time to target", "steps to target", "recommended: ",
                           "held-out loss @ training seconds"})
    CHECK_THAT(outcome.output, Catch::Contains(text));

  nlohmann::json result = nlohmann::json::parse(test::read_text(convergence_file(dir, ".json")));
  REQUIRE(result["rows"].size() == 3);
  CHECK(result["eval_every"] == 10);
  CHECK(result["num_steps"] == 45);
  const auto &first = result["rows"][0];
  REQUIRE(first["status"] == "ok");
  const double target = first["final_eval_loss"].get<double>();
  CHECK(result["target_loss"].get<double>() == target);
  CHECK(result["target_from"] == "the final held-out loss of none");
  CHECK(result["noise"] == convergence_noise_note(1));
  CHECK_THAT(outcome.output, Catch::Contains("(" + convergence_noise_note(1) + ")"));
  std::string fastest;
  double best = 1e300;
  for (size_t i = 0; i < 2; ++i) {
    const auto &row = result["rows"][i];
    INFO(row.dump());
    REQUIRE(row["status"] == "ok");
    const std::string run_dir = row["run_dir"];
    std::map<int64_t, double> seconds = seconds_by_step(run_dir);
    std::vector<int64_t> steps;
    for (const auto &point : row["eval_curve"]) {
      steps.push_back(point["step"]);
      CHECK(point["train_s"].get<double>() == Approx(seconds.at(point["step"])).epsilon(1e-6));
    }
    CHECK(steps == std::vector<int64_t>{10, 20, 30, 40, 45});
    const auto &curve = row["eval_curve"];
    CHECK(curve[4]["loss"].get<double>() < curve[0]["loss"].get<double>());  // it learns
    nlohmann::json summary = nlohmann::json::parse(test::read_text(run_dir + "/summary.json"));
    CHECK(row["final_eval_loss"].get<double>() == Approx(summary["eval_loss"].get<double>()).epsilon(1e-7));
    CHECK(row["train_s"] == curve[4]["train_s"]);
    CHECK(row["loss_ratio"].get<double>() ==
          Approx(row["final_eval_loss"].get<double>() / target).epsilon(1e-8));  // JSON keeps 9 digits
    // Time and steps to the target: the first evaluation at or below it.
    nlohmann::json reached;
    for (const auto &point : curve)
      if (point["loss"].get<double>() <= target) {
        reached = point;
        break;
      }
    if (reached.is_null()) {
      CHECK(row["time_to_target_s"].is_null());
      continue;
    }
    CHECK(row["steps_to_target"] == reached["step"]);
    CHECK(row["time_to_target_s"] == reached["train_s"]);
    if (reached["train_s"].get<double>() < best) {
      best = reached["train_s"].get<double>();
      fastest = row["config"].get<std::string>();
    }
  }
  CHECK(first["loss_ratio"].get<double>() == 1.0);  // exactly
  CHECK(first["time_to_target_s"].get<double>() <= first["train_s"].get<double>());
  CHECK(result["recommended"] == fastest);
  for (const auto &row : result["rows"])
    if (row["config"] == fastest) CHECK_THAT(row["reason"].get<std::string>(), Catch::StartsWith("first to held-out loss"));

  const auto &bad = result["rows"][2];
  CHECK(bad["status"] == "error");
  CHECK_THAT(bad["message"].get<std::string>(), Catch::Contains("no_such_key"));
  CHECK_THAT(bad["reason"].get<std::string>(), Catch::StartsWith("error: "));
  CHECK(bad["verdict"] == "error");
  CHECK(bad["eval_curve"].empty());
  CHECK(bad["time_to_target_s"].is_null());

  std::stringstream csv(test::read_text(convergence_file(dir, ".csv")));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  REQUIRE(lines.size() == 4);
  CHECK(lines[0].rfind("suite,config,trial,status,final_eval_loss,loss_ratio,train_s,time_to_target_s,", 0) == 0);
  CHECK_THAT(lines[0], Catch::EndsWith(",recommended,verdict,reason,message"));
  for (const std::string &line : lines) CHECK(count(line, ",") == count(lines[0], ","));

  // The report: one line per row that ran in both loss charts, every row in their legends.
  std::string html = test::read_text(convergence_file(dir, ".html"));
  for (const char *id : {"loss-step", "loss-time"}) {
    INFO(id);
    std::string svg = chart(html, id);
    REQUIRE(!svg.empty());
    CHECK(count(svg, "<polyline class=\"mark\"") == 2);
    CHECK(count(svg, "class=\"mark point\"") == 2 * 5);
    for (const char *label : {">none<", ">zenflow<", ">bad (error)<"}) CHECK_THAT(svg, Catch::Contains(label));
    CHECK(count(svg, "class=\"reference\"") == 1);
  }
  CHECK_THAT(html, Catch::Contains("<p id=\"noise\" class=\"note\">one trial per row"));
  CHECK(fs::exists(dir + "/recommended-convergence.toml"));
}

TEST_CASE("bench convergence figures: ratio to the first row, time and steps to the target", "[bench]") {
  // Evaluations at steps 10, 20, 30 after 0.5, 1.0, 1.5 s of training.
  std::vector<RowResult> rows{recorded("adamw", "ok", {3.0, 2.0, 1.5}), recorded("fast", "ok", {2.5, 1.4, 1.2}),
                              recorded("slow", "ok", {3.0, 2.9, 2.8}), recorded("big", "OOM", {}),
                              recorded("typo", "error", {})};
  REQUIRE(convergence_figures(rows, -1) == 1.5);
  CHECK(rows[0].loss_ratio == 1.0);
  CHECK(rows[0].target_step == 30);
  CHECK(rows[0].target_s == 1.5);
  CHECK(rows[1].loss_ratio == Approx(0.8));
  CHECK(rows[1].target_step == 20);
  CHECK(rows[1].target_s == 1.0);
  CHECK(rows[2].target_step == -1);
  CHECK(rows[3].loss_ratio == 0);
  Recommendation rec = recommend_convergence(rows, 1.5);
  CHECK(rec.chosen == 1);
  CHECK(rec.reasons[1] == "first to held-out loss 1.5000: 1.0 s of training (step 20)");
  CHECK(rec.reasons[0] == "later to 1.5000: 1.5 s vs 1.0 s (fast)");
  CHECK(rec.reasons[2] == "did not reach 1.5000 (final held-out loss 2.8000)");
  CHECK(rec.reasons[3] == "OOM: CUDA out of memory");
  CHECK(rec.reasons[4] == "error: unknown key 'frobnicate'");
  CHECK(rec.verdicts == std::vector<std::string>{"later", "chosen", "did not reach", "OOM", "error"});

  // A target given: reaching it exactly counts; a tie goes to the earlier row.
  REQUIRE(convergence_figures(rows, 2.5) == 2.5);
  CHECK(rows[0].target_step == 20);
  CHECK(rows[1].target_step == 10);
  CHECK(rows[2].target_step == -1);  // figures of an earlier target are not kept
  CHECK(recommend_convergence(rows, 2.5).chosen == 1);
  REQUIRE(convergence_figures(rows, 2.0) == 2.0);
  CHECK(rows[1].target_step == 20);
  CHECK(recommend_convergence(rows, 2.0).chosen == 0);

  // The first row did not run: no ratios, no target unless one is given.
  std::vector<RowResult> headless{recorded("adamw", "error", {}), recorded("zenflow", "ok", {2.0, 1.0})};
  REQUIRE(convergence_figures(headless, -1) == -1);
  CHECK(headless[1].loss_ratio == 0);
  rec = recommend_convergence(headless, -1);
  CHECK(rec.chosen == -1);
  CHECK_THAT(rec.reasons[1], Catch::StartsWith("no target loss"));
  CHECK(rec.verdicts[1] == "no target");
  REQUIRE(convergence_figures(headless, 1.5) == 1.5);
  CHECK(recommend_convergence(headless, 1.5).chosen == 1);
}

TEST_CASE("bench convergence over trials: median time to target, and a trial that misses it rules its row out",
          "[bench]") {
  // a reaches 1.5 at 1.5, 0.5, 1.0 s (median 1.0); b at 0.5, 1.5, 1.5 s (median 1.5).
  std::vector<RowResult> rows{recorded("a", "ok", {3.0, 2.0, 1.5}, 1), recorded("a", "ok", {1.5, 1.5, 1.5}, 2),
                              recorded("a", "ok", {2.0, 1.5, 1.5}, 3), recorded("b", "ok", {1.0, 1.0, 1.0}, 1),
                              recorded("b", "ok", {2.0, 2.0, 1.2}, 2), recorded("b", "ok", {1.6, 1.6, 1.4}, 3)};
  REQUIRE(convergence_figures(rows, -1) == 1.5);
  Recommendation rec = recommend_convergence(rows, 1.5);
  CHECK(rec.chosen == 0);
  CHECK(rec.reasons[0] == "first to held-out loss 1.5000: median 1.0 s of training (step 30)");
  CHECK(rec.reasons[3] == "later to 1.5000: median 1.5 s vs 1.0 s (a)");
  CHECK(rec.verdicts[3] == "later");
  CHECK_THAT(convergence_noise_note(3), Catch::Contains("median") && Catch::Contains("within noise of it"));
  CHECK_THAT(convergence_noise_note(1), Catch::Contains("no noise estimate") && Catch::Contains("--target-tolerance"));
  // The default target is the highest final loss of the first row's trials, so that each of them
  // reaches it; the ratios are over their mean. A trial of the reference that did not run is left out.
  std::vector<RowResult> noisy{recorded("a", "ok", {3.0, 2.0, 1.52}, 1), recorded("a", "ok", {3.0, 1.9, 1.48}, 2),
                               recorded("a", "error", {}, 3), recorded("b", "ok", {2.0, 1.51, 1.45}, 1),
                               recorded("b", "ok", {2.0, 1.55, 1.5}, 2), recorded("b", "ok", {2.0, 1.6, 1.56}, 3)};
  REQUIRE(convergence_figures(noisy, -1) == Approx(1.52));
  CHECK(noisy[0].loss_ratio == Approx(1.52 / 1.5));
  CHECK(noisy[1].loss_ratio == Approx(1.48 / 1.5));
  CHECK(noisy[0].target_step == 30);
  CHECK(noisy[1].target_step == 30);
  CHECK(noisy[3].target_step == 20);
  CHECK(noisy[4].target_step == 30);
  CHECK(noisy[5].target_step == -1);  // 1.56 stays above the reference's worst
  noisy[0].status = "error";  // the reference is then its second trial alone
  REQUIRE(convergence_figures(noisy, -1) == Approx(1.48));
  CHECK(noisy[1].loss_ratio == Approx(1.0));
  CHECK(noisy[4].target_step == -1);
  noisy[1].status = "error";  // and none when no trial of it ran
  REQUIRE(convergence_figures(noisy, -1) == -1);
  CHECK(noisy[3].loss_ratio == 0);

  rows[1].evals = {{10, 1.9, 0.5}};
  convergence_figures(rows, 1.5);
  rec = recommend_convergence(rows, 1.5);
  CHECK(rec.chosen == 3);
  CHECK(rec.reasons[0] == "did not reach 1.5000 in trial 2 (final held-out loss 1.9000)");
}

TEST_CASE("bench convergence: bad row specs and flags are usage errors that name them", "[bench]") {
  std::string dir = test::scratch_dir("bench_convergence_usage");
  struct Case {
    std::string args, message;
  };
  for (const Case &c :
       {Case{"convergence --rows x:frobnicate",
             "--rows x:frobnicate: 'frobnicate' is neither a table.key=value override, steps_factor=F nor a named row (none, "
             "cpu_optimizer, cpu_optimizer_auto, cpu_full, nvme, zenflow, zenflow_auto)"},
        Case{"convergence --rows none zenflow none", "--rows: two rows named 'none'"},
        Case{"convergence --rows a/b:none", "--rows a/b:none: a row's name is letters, digits"},
        Case{"convergence --rows empty:", "--rows empty:: no overrides after ':'"},
        Case{"convergence --rows nvme", "the nvme row needs --nvme-path DIR"},
        Case{"convergence --target-loss 0", "--target-loss 0: expected a number in (0, "},
        Case{"convergence --steps-factor 0", "--steps-factor 0: expected a number in (0, 100]"},
        Case{"convergence --target-tolerance 0.9", "--target-tolerance 0.9: expected a number in (0, 0.5]"},
        Case{"convergence --rows zf:zenflow,steps_factor=x", "--rows zf:zenflow,steps_factor=x: steps_factor x: expected"},
        Case{"stages --eval-every 5", "--eval-every is not an option of `zfcore bench stages`"}}) {
    auto outcome = test::run_command(test::zfcore() + " bench " + c.args + " --device cpu --output-dir " + dir);
    INFO(c.args << "\n" << outcome.output);
    CHECK(outcome.exit_code == 2);
    CHECK_THAT(outcome.output, Catch::Contains(c.message));
    CHECK(fs::is_empty(dir));  // nothing ran
  }
}

TEST_CASE("bench convergence answers how much longer: rows that train longer, steps and time over the first's",
          "[bench]") {
  // --steps-factor: every row after the first trains that many times --num-steps; a row's own
  // steps_factor=F wins over it, the first included.
  SuiteOptions o = parse_suite_options(
      "convergence", {"--device", "cpu", "--num-steps", "200", "--steps-factor", "1.5", "--rows", "none",
                      "zf:zenflow,zenflow.update_interval=2", "zf2:zenflow,steps_factor=2", "ref2:none,steps_factor=0.5"});
  REQUIRE(o.rows.size() == 4);
  CHECK(convergence_steps(o, o.rows[0], true) == 200);
  CHECK(convergence_steps(o, o.rows[1], false) == 300);
  CHECK(convergence_steps(o, o.rows[2], false) == 400);
  CHECK(convergence_steps(o, o.rows[3], false) == 100);
  CHECK(o.rows[1].overrides.back() == "zenflow.update_interval=2");  // steps_factor is no override
  CHECK(std::find(o.rows[2].overrides.begin(), o.rows[2].overrides.end(), "steps_factor=2") == o.rows[2].overrides.end());

  // The first row reaches 1.5 at step 30 in 1.5 s; the longer row at step 45 in 3.0 s: 1.5x the
  // steps, 2x the time (its steps are slower).
  std::vector<RowResult> rows{recorded("adamw", "ok", {3.0, 2.0, 1.5}), recorded("zenflow", "ok", {})};
  rows[1].evals = {{15, 3.0, 1.0}, {30, 2.5, 2.0}, {45, 1.45, 3.0}, {60, 1.4, 4.0}};
  REQUIRE(convergence_figures(rows, -1) == 1.5);
  CHECK(rows[1].target_step == 45);
  CHECK(rows[1].steps_over_first == Approx(1.5));
  CHECK(rows[1].time_over_first == Approx(2.0));
  CHECK(rows[0].steps_over_first == 1.0);
}

TEST_CASE("bench convergence: one trial is compared within a stated tolerance, and rows that arrive together tie",
          "[bench]") {
  // One trial of the reference measures no spread: a row 0.2% above its final loss reaches the
  // target within a 0.5% tolerance, and one that misses says how close it came.
  std::vector<RowResult> rows{recorded("adamw", "ok", {3.0, 2.0, 1.5}), recorded("near", "ok", {3.0, 2.0, 1.503}),
                              recorded("far", "ok", {3.0, 2.0, 1.53})};
  REQUIRE(convergence_figures(rows, -1, 0) == 1.5);
  CHECK(rows[1].target_step == -1);
  REQUIRE(convergence_figures(rows, -1, 0.005) == 1.5);
  CHECK(rows[1].target_step == 30);
  CHECK(rows[2].target_step == -1);
  CHECK(rows[2].best_over_target == Approx(1.02));
  CHECK(parse_suite_options("convergence", {"--device", "cpu", "--target-tolerance", "0.01"}).target_tolerance == 0.01);
  CHECK(parse_suite_options("convergence", {"--device", "cpu", "--target-tolerance", "0"}).target_tolerance == 0);
  CHECK(parse_suite_options("convergence", {"--device", "cpu"}).target_tolerance == 0);

  // Two rows that reach the target at the same evaluation, 0.05 s (3%) apart: within noise, and
  // the first listed is recommended, not the one a hair ahead.
  std::vector<RowResult> same{recorded("adamw", "ok", {3.0, 2.0, 1.5}), recorded("auto", "ok", {3.0, 2.0, 1.5})};
  for (EvalPoint &p : same[1].evals) p.train_s -= 0.05;
  convergence_figures(same, -1);
  Recommendation rec = recommend_convergence(same, 1.5);
  CHECK(rec.chosen == 0);
  CHECK(rec.verdicts == std::vector<std::string>{"chosen", "within noise"});
  CHECK_THAT(rec.reasons[1], Catch::StartsWith("within noise of adamw: ") && Catch::Contains("both at step 30"));
  CHECK_THAT(rec.reasons[0], Catch::Contains("2 rows arrive together"));
  // A clear lead (an evaluation earlier) still wins.
  same[1].evals[1].loss = 1.5;
  convergence_figures(same, -1);
  CHECK(recommend_convergence(same, 1.5).chosen == 1);
}
