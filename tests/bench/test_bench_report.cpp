// The suite's HTML report: a tiny CPU suite (two trials of a configuration that runs and of one
// that fails) writes it, and a real headless browser (Debian's chromium) loads it: the page's own
// check says every chart drew and no script failed, and the dumped DOM has the three charts with
// every configuration's label. A copy with one chart emptied and a failing script must be judged
// broken, so the check can fail. Also: the report of recorded rows (OOM and error rows, ZenFlow's
// boundary steps), and a convergence report of recorded rows in the browser: both loss charts.
#include "bench/suite.hpp"
#include "support/browser.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

using namespace zf;
using zf::test::chart;
using zf::test::chromium;
using zf::test::count;
using zf::test::dump_dom;
namespace fs = std::filesystem;

namespace {

std::string only_file(const std::string &dir, const std::string &ext) {
  std::vector<std::string> found;
  for (const auto &entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ext && entry.path().filename().string().rfind("offload_", 0) == 0)
      found.push_back(entry.path().string());
  REQUIRE(found.size() == 1);
  return found[0];
}

RowResult recorded(const std::string &name, int trial, const std::string &status, double ms) {
  RowResult r;
  r.row.name = name;
  r.trial = trial;
  r.status = status;
  r.message = status == "OOM" ? "CUDA out of memory. Tried to allocate 2.00 GiB" : status == "ok" ? "" : "no <plugin>";
  if (status != "ok") return r;
  r.mean_step_ms = ms;
  r.fwd_ms = ms / 4, r.bwd_ms = ms / 2, r.step_ms = ms / 8;
  r.gpu_peak = 3ull << 30, r.host_rss = 5ull << 30, r.pinned_peak = 1ull << 30, r.estimate = 4ull << 30;
  r.host_ledger_peak = 2ull << 30;
  r.timers_ms = {{"fwd", r.fwd_ms}, {"update_wait", 0.5}};
  for (int step = 0; step < 6; ++step) {
    r.step_times_ms.push_back(step % 3 == 2 ? 2 * ms : ms);
    r.step_updates.push_back(step % 3 == 2 ? "gpu,cpu" : "gpu");
  }
  return r;
}

}  // namespace

TEST_CASE("bench report: a CPU suite's HTML loads in headless Chromium, every chart drawn", "[bench][browser]") {
  std::string browser = chromium();
  if (browser.empty())
    FAIL("chromium is not installed: this test loads the report in a real headless browser. "
         "tools/setup.sh installs it (Debian package `chromium`: apt-get install chromium)");

  std::string dir = test::scratch_dir("bench_report");
  auto outcome = test::run_command("timeout 120 " + test::zfcore() + " bench offload --strategies none nvme " +
                                   "--nvme-path /proc/zfcore-no-such-dir --trials 2 --device cpu --model " + test::source_dir() +
                                   "/tests/bench/tiny_bench.toml --num-steps 2 --warmup-steps 1 " +
                                   "--set run.threads=1 --output-dir " + dir);
  INFO(outcome.output);
  REQUIRE(outcome.exit_code == 0);
  std::string html_file = only_file(dir, ".html");
  CHECK_THAT(outcome.output, Catch::Contains(html_file));

  std::string dom = dump_dom(browser, html_file);
  INFO(dom.substr(0, 4000));
  CHECK(count(dom, "data-report=\"ok\"") == 1);
  CHECK(count(dom, "data-charts=\"3\"") == 1);
  CHECK(count(dom, "<svg class=\"chart\"") == 3);
  for (const char *id : {"step-time", "memory", "step-trace"}) {
    std::string svg = chart(dom, id);
    INFO(id);
    REQUIRE(!svg.empty());
    std::vector<std::string> labels = {"none #1", "none #2"};
    if (std::string(id) != "step-trace") labels.insert(labels.end(), {"nvme #1", "nvme #2"});  // failed: no steps
    for (const std::string &label : labels) CHECK_THAT(svg, Catch::Contains(">" + label + "</text>"));
  }
  CHECK(count(chart(dom, "step-time"), "<rect class=\"mark\"") == 2 * 4);  // two ok rows, four phases each
  CHECK(count(chart(dom, "step-trace"), "<polyline class=\"mark\"") == 2);
  // The failing configuration: in the table with its status and message, and noted in the bar charts.
  CHECK(count(dom, "<tr class=\"status-error\">") == 2);
  CHECK(count(chart(dom, "step-time"), "class=\"mark note\">error: ") == 2);

  // The page's check can fail: a chart with nothing drawn, and a script that throws.
  std::string html = test::read_text(html_file), trace = chart(html, "step-trace");
  std::string emptied = std::regex_replace(trace, std::regex("<polyline[^\\n]*?</polyline>"), "");
  REQUIRE(emptied != trace);
  html.replace(html.find(trace), trace.size(), emptied);
  html.replace(html.find("<body>"), 6, "<body><script>undefined_function();</script>");
  std::string broken_file = dir + "/broken.html";
  { std::ofstream(broken_file) << html; }
  std::string broken = dump_dom(browser, broken_file);
  CHECK_THAT(broken, Catch::Contains("data-report=\"broken: script error: "));
  CHECK_THAT(broken, Catch::Contains("step-trace\""));

  // The memory chart shows the tiers' measured peaks the JSON has, on this CPU run too.
  nlohmann::json rows = nlohmann::json::parse(test::read_text(only_file(dir, ".json")))["rows"];
  CHECK(rows[0]["host_ledger_peak_bytes"].get<uint64_t>() > 0);  // on CPU the model and its state are there
  CHECK_THAT(chart(dom, "memory"), Catch::Contains("<title>none #1: device tier peak "));
  for (const char *tier : {"none #1: host tier peak ", "none #1: host RSS ", "none #1: estimate "}) {
    INFO(tier);
    std::string memory = chart(dom, "memory");
    size_t at = memory.find(std::string("<title>") + tier);
    REQUIRE(at != std::string::npos);
    CHECK(memory.substr(at + 7 + std::strlen(tier), 1) != "-");  // a measured value, not "-"
  }
  CHECK(fs::exists(dir + "/recommended-offload.toml"));

  // The JSON and CSV carry the trials; with two trials the verdict compares their means.
  nlohmann::json result = nlohmann::json::parse(test::read_text(only_file(dir, ".json")));
  REQUIRE(result["rows"].size() == 4);
  CHECK(result["trials"] == 2);
  CHECK(result["rows"][1]["config"] == "none");
  CHECK(result["rows"][1]["trial"] == 2);
  CHECK(result["rows"][1]["recommended"] == true);
  CHECK_THAT(result["rows"][0]["reason"].get<std::string>(), Catch::Contains("mean ") && Catch::Contains("over 2 trials"));
  CHECK(result["rows"][0]["timers_ms"].contains("fwd"));
  CHECK(result["rows"][0]["step_updates"].size() == 3);
  CHECK(test::read_text(only_file(dir, ".csv")).rfind("suite,config,trial,status,", 0) == 0);
}

TEST_CASE("bench report of recorded rows: OOM and error rows with their message, boundary steps marked",
          "[bench]") {
  SuiteOptions o;
  o.suite = "zenflow";
  o.device = "cuda";
  o.warmup_steps = 2;
  std::vector<RowResult> rows{recorded("topk0.1-u4", 1, "ok", 100), recorded("topk0.2-u2", 1, "OOM", 0),
                              recorded("topk0.05-u8", 1, "error", 0), recorded("topk0.1-u8", 1, "ok", 80)};
  Recommendation rec = recommend(rows, MachineLimits{}, 1);
  REQUIRE(rec.chosen == 3);
  std::string html = suite_html(o, SuiteReport{"results/zenflow_20250101-000000", "base.toml", {}, {}}, rows, rec);
  CHECK(count(html, "<svg class=\"chart\"") == 3);
  CHECK_THAT(html, Catch::Contains("<tr class=\"status-OOM\">"));
  CHECK_THAT(html, Catch::Contains("CUDA out of memory. Tried to allocate 2.00 GiB"));
  CHECK_THAT(html, Catch::Contains("no &lt;plugin&gt;"));  // escaped
  CHECK(count(html, "no <plugin>") == 0);
  CHECK_THAT(html, Catch::Contains("<tr class=\"status-ok chosen\">"));
  CHECK_THAT(html, Catch::Contains("Recommended: topk0.1-u8"));
  CHECK_THAT(html, Catch::Contains("update_wait"));
  CHECK(count(chart(html, "step-trace"), "class=\"mark boundary\"") == 2 * 2);  // steps 3 and 6 of two runs
  // Every measured tier's peak beside the estimate: device (GPU), host, pinned, host RSS.
  CHECK(count(chart(html, "memory"), "<rect class=\"mark\"") == 2 * 5);
  for (const char *bar : {"topk0.1-u8: GPU peak 3 GiB", "topk0.1-u8: host tier peak 2 GiB", "topk0.1-u8: pinned tier peak 1 GiB",
                          "topk0.1-u8: host RSS 5 GiB", "topk0.1-u8: estimate 4 GiB"})
    CHECK_THAT(chart(html, "memory"), Catch::Contains(std::string("<title>") + bar + "</title>"));
  CHECK(count(chart(html, "step-trace"), "class=\"warmup\"") == 1);
  CHECK(html.find("http://") == html.find("http://www.w3.org/2000/svg"));  // nothing fetched
}

TEST_CASE("bench report of a convergence suite: both loss charts draw in headless Chromium, one line per row",
          "[bench][browser]") {
  std::string browser = chromium();
  if (browser.empty()) FAIL("chromium is not installed (tools/setup.sh installs it: apt-get install chromium)");
  SuiteOptions o;
  o.suite = "convergence";
  o.device = "cpu";
  o.num_steps = 6;
  o.eval_every = 2;
  std::vector<RowResult> rows{recorded("none", 1, "ok", 100), recorded("zenflow", 1, "ok", 60),
                              recorded("zf-typo", 1, "error", 0)};
  // Held-out loss at steps 2, 4, 6, the training seconds from the recorded step times.
  for (size_t k = 0; k < 2; ++k) {
    RowResult &r = rows[k];
    double ms = 0;
    for (size_t step = 1; step <= r.step_times_ms.size(); ++step) {
      ms += r.step_times_ms[step - 1];
      double rate = k == 0 ? 0.3 : 0.24;
      if (step % 2 == 0) r.evals.push_back({int64_t(step), 3.0 - rate * double(step), ms / 1000});
    }
  }
  SuiteReport report{"results/convergence_20250101-000000", "base.toml", {}, {}};
  report.target_loss = convergence_figures(rows, -1);
  report.target_from = "the final held-out loss of none";
  REQUIRE(report.target_loss == Approx(1.2));
  Recommendation rec = recommend_convergence(rows, report.target_loss);
  REQUIRE(rec.chosen == 0);  // zenflow's steps are faster but it ends at 1.56
  std::string html_file = test::scratch_dir("bench_report_convergence") + "/convergence.html";
  { std::ofstream(html_file) << suite_html(o, report, rows, rec); }

  std::string dom = dump_dom(browser, html_file);
  INFO(dom.substr(0, 4000));
  CHECK(count(dom, "data-report=\"ok\"") == 1);
  CHECK(count(dom, "data-charts=\"5\"") == 1);  // the two loss charts and the three speed charts
  for (const char *id : {"loss-step", "loss-time"}) {
    INFO(id);
    std::string svg = chart(dom, id);
    CHECK(count(svg, "<polyline class=\"mark\"") == 2);
    CHECK(count(svg, "class=\"mark point\"") == 2 * 3);
    for (const char *label : {">none</text>", ">zenflow</text>", ">zf-typo (error)</text>"})
      CHECK_THAT(svg, Catch::Contains(label));
  }
  CHECK_THAT(dom, Catch::Contains("Recommended: none"));
  CHECK_THAT(dom, Catch::Contains("<td>not reached (closest 1.3"));  // zenflow ends at 1.56 against 1.2
}
