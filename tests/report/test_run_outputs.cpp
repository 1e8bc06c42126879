// What a run leaves beside its model, read as a user reads it: steps.csv holds every column and
// value of steps.jsonl (nested keys spelled out), the step line shows the learning rate, the
// progress bar says elapsed time, ETA and steps/s on its own line, and report.html draws the run's
// curves in a real headless browser.
#include "support/browser.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace zf;

namespace {

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// A steps.jsonl line as steps.csv names its columns: {"timers_ms": {"fwd": 1}} is timer_fwd_ms,
// {"memory_bytes": {"host": 1}} mem_host_bytes, {"gpu_peak_bytes": {"allocated": 1}} gpu_peak_allocated_bytes,
// {"rank_step_ms": [1, 2]} rank0_step_ms and rank1_step_ms, {"rank_timers_ms": {"fwd": [1, 2]}} rank0_timer_fwd_ms, ...
std::map<std::string, nlohmann::json> flatten(const nlohmann::json &step) {
  std::map<std::string, nlohmann::json> out;
  for (const auto &[key, value] : step.items()) {
    if (key == "rank_step_ms") {
      for (size_t rank = 0; rank < value.size(); ++rank) out["rank" + std::to_string(rank) + "_step_ms"] = value[rank];
    } else if (!value.is_object()) {
      out[key] = value;
    } else {
      for (const auto &[inner, number] : value.items()) {
        if (key == "timers_ms") out["timer_" + inner + "_ms"] = number;
        else if (key == "memory_bytes") out["mem_" + inner + "_bytes"] = number;
        else if (key == "gpu_peak_bytes") out["gpu_peak_" + inner + "_bytes"] = number;
        else if (key == "rank_timers_ms")
          for (size_t rank = 0; rank < number.size(); ++rank)
            out["rank" + std::to_string(rank) + "_timer_" + inner + "_ms"] = number[rank];
        else FAIL("steps.jsonl has a nested key the test does not know: " << key);
      }
    }
  }
  return out;
}

// Fields of one CSV line, with RFC 4180 quoting.
std::vector<std::string> csv_fields(const std::string &line) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    if (quoted && line[i] == '"' && i + 1 < line.size() && line[i + 1] == '"') fields.back() += line[++i];
    else if (line[i] == '"') quoted = !quoted;
    else if (line[i] == ',' && !quoted) fields.emplace_back();
    else fields.back() += line[i];
  }
  return fields;
}

}  // namespace

TEST_CASE("steps.csv holds every column and value of steps.jsonl", "[report]") {
  const std::string dir = test::scratch_dir("report_columns");
  // Evaluations from step 4 on (eval_loss is a new column then), clipping (grad_norm), a checkpoint
  // at step 6 and a resume to step 12: the columns stay those of steps.jsonl across all of it.
  const std::string command = test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" +
                              " --set run.output_dir=" + dir + " --set run.progress=off --set model.hidden=64" +
                              " --set data.eval_fraction=0.25 --set train.eval_every=4 --set train.clip_grad_norm=1" +
                              " --set checkpoint.every=6 --set train.micro_batch=16";
  auto first = test::run_command(command + " --set train.steps=9 --set checkpoint.final=false");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  // The resumed run adds every rank's timers (run.rank_timers): new columns, empty in the rows before.
  auto resumed = test::run_command(command + " --set train.steps=12 --set run.rank_timers=true");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);

  std::vector<std::string> jsonl = lines_of(test::read_text(dir + "/steps.jsonl"));
  std::vector<std::string> csv = lines_of(test::read_text(dir + "/steps.csv"));
  REQUIRE(jsonl.size() == 12);
  REQUIRE(csv.size() == 13);  // the header and 12 steps
  const std::vector<std::string> header = csv_fields(csv[0]);
  std::set<std::string> jsonl_columns;
  for (size_t i = 0; i < jsonl.size(); ++i) {
    std::map<std::string, nlohmann::json> expected = flatten(nlohmann::json::parse(jsonl[i]));
    std::vector<std::string> row = csv_fields(csv[i + 1]);
    REQUIRE(row.size() == header.size());
    std::map<std::string, std::string> cells;
    for (size_t c = 0; c < header.size(); ++c) cells[header[c]] = row[c];
    for (const auto &[column, value] : expected) {
      INFO("step " << i + 1 << ", column " << column);
      jsonl_columns.insert(column);
      REQUIRE(cells.count(column) == 1);
      if (value.is_string()) CHECK(cells[column] == value.get<std::string>());
      else CHECK(std::stod(cells[column]) == value.get<double>());
      cells.erase(column);
    }
    for (const auto &[column, cell] : cells) {  // what steps.jsonl leaves out at this step is empty here
      INFO("step " << i + 1 << ", column " << column);
      CHECK(cell.empty());
    }
  }
  CHECK(std::set<std::string>(header.begin(), header.end()) == jsonl_columns);
  for (const char *column : {"eval_loss", "grad_norm", "lr", "timer_fwd_ms", "mem_host_bytes"}) {
    INFO(column);
    CHECK(jsonl_columns.count(column) == 1);
  }
  // The step line shows the learning rate; without a terminal it says how far the run is.
  CHECK_THAT(resumed.output, Catch::Contains(" | lr 0.001 | ") && Catch::Contains(" elapsed, ETA ") &&
                                 Catch::Contains(" steps/s"));
}

TEST_CASE("the progress bar shows elapsed time, ETA and steps/s and keeps its own line", "[report]") {
  const std::string dir = test::scratch_dir("report_progress");
  auto run = test::run_command(test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" +
                               " --set run.output_dir=" + dir + " --set run.progress=on --set model.hidden=64" +
                               " --set train.steps=8 --set run.log_every=4 --set checkpoint.every=2");
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  int bars = 0;
  for (const std::string &line : lines_of(run.output)) {
    // The bar is redrawn in place ("\r"): what follows the last "\r" on a line is what stays there.
    std::string shown = line.substr(line.rfind('\r') == std::string::npos ? 0 : line.rfind('\r') + 1);
    if (shown.rfind("\033[K", 0) == 0) shown.erase(0, 3);
    if (shown.find("[===") == std::string::npos) continue;
    ++bars;
    INFO(shown);
    // Nothing else shares the bar's line: a checkpoint message or a step line clears it first.
    CHECK(shown.rfind("[===", 0) == 0);
    CHECK(shown.find("zfcore:") == std::string::npos);
    CHECK(shown.find("step ") == std::string::npos);
  }
  CHECK(bars >= 1);
  CHECK_THAT(run.output, Catch::Contains("] 8/8 loss ") && Catch::Contains(" elapsed, ETA 0:00, ") &&
                             Catch::Contains(" steps/s"));
}

namespace {
// The points of the polyline titled `label` in an SVG chart.
size_t polyline_points(const std::string &svg, const std::string &label) {
  const size_t title = svg.find("<title>" + label + "</title></polyline>");
  if (title == std::string::npos) return 0;
  const size_t begin = svg.rfind("points=\"", title) + 8;
  const std::string points = svg.substr(begin, svg.find('"', begin) - begin);
  return test::count(points, ",");
}
}  // namespace

TEST_CASE("report.html draws the run's curves in headless Chromium, at each checkpoint and at the end",
          "[report][browser]") {
  const std::string browser = test::chromium();
  if (browser.empty()) FAIL("chromium is not installed (tools/setup.sh --tests installs it: apt-get install chromium)");
  const std::string common = test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" +
                             " --set run.progress=off --set model.hidden=64 --set train.micro_batch=16" +
                             " --set data.eval_fraction=0.25 --set train.eval_every=4 --set train.steps=10";
  const std::string dir = test::scratch_dir("report_html");
  auto run = test::run_command(common + " --set run.output_dir=" + dir);
  INFO(run.output);
  REQUIRE(run.exit_code == 0);
  std::string dom = test::dump_dom(browser, dir + "/report.html");
  INFO(dom.substr(0, 3000));
  CHECK(test::count(dom, "data-report=\"ok\"") == 1);
  CHECK(test::count(dom, "data-charts=\"5\"") == 1);
  for (const char *id : {"loss-step", "loss-time"}) {
    INFO(id);
    const std::string svg = test::chart(dom, id);
    CHECK(polyline_points(svg, "training loss") == 10);  // every step
    CHECK(polyline_points(svg, "held-out loss") == 3);   // steps 4, 8, 10
    CHECK(test::count(svg, "class=\"mark point\"") == 3);
  }
  CHECK(polyline_points(test::chart(dom, "lr"), "learning rate") == 10);
  CHECK(polyline_points(test::chart(dom, "step-time"), "step time") == 10);
  CHECK(polyline_points(test::chart(dom, "memory"), "host tier") == 10);
  CHECK(dom.find("http://") == dom.find("http://www.w3.org/2000/svg"));  // nothing fetched

  // A run that fails at step 7 after a checkpoint at step 6 leaves the report of its first 6 steps.
  const std::string failed = test::scratch_dir("report_html_failed");
  auto broken = test::run_command(common + " --set run.output_dir=" + failed + " --set checkpoint.every=3" +
                                  " --set run.plugin_path=" + test::binary_dir() + "/tests/abi_plugins" +
                                  " --set stage.plugin=faulty --set stage.fail_rank=0 --set stage.fail_step=7" +
                                  " --set stage.fail_mode=error");
  INFO(broken.output);
  REQUIRE(broken.exit_code != 0);
  std::string partial = test::dump_dom(browser, failed + "/report.html");
  CHECK(test::count(partial, "data-report=\"ok\"") == 1);
  CHECK(polyline_points(test::chart(partial, "loss-step"), "training loss") == 6);
}

// A run resumed from a checkpoint reports the run's own initial loss (its step 1's, carried in the
// checkpoint), not the first resumed step's, and its report.html says where it resumed.
TEST_CASE("summary.json's initial_loss after a resume is the run's step-1 loss, and report.html marks the resume",
          "[report]") {
  const std::string dir = test::scratch_dir("resumed_initial_loss");
  const std::string run = test::zfcore() + " run " + test::source_dir() + "/examples/linear_stack.toml" +
                          " --set run.progress=off --set run.output_dir=" + dir + "/run";
  test::Outcome first = test::run_command(run + " --set train.steps=2");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const double initial = std::stod(test::json_field(test::read_text(dir + "/run/summary.json"), "initial_loss"));
  test::Outcome resumed = test::run_command(run + " --set train.steps=4");
  INFO(resumed.output);
  REQUIRE(resumed.exit_code == 0);
  const std::string summary = test::read_text(dir + "/run/summary.json");
  CHECK(test::json_field(summary, "first_step") == "3");
  CHECK(std::stod(test::json_field(summary, "initial_loss")) == initial);
  const std::vector<std::string> rows = lines_of(test::read_text(dir + "/run/steps.jsonl"));
  REQUIRE(rows.size() == 4);
  CHECK(nlohmann::json::parse(rows[0])["loss"].get<double>() == Approx(initial).epsilon(1e-8));
  CHECK(nlohmann::json::parse(rows[2])["loss"].get<double>() != Approx(initial).epsilon(1e-3));
  const std::string html = test::read_text(dir + "/run/report.html");
  CHECK_THAT(html, Catch::Contains("Resumed from the checkpoint of step 2") &&
                       Catch::Contains("step 3: resumed from the checkpoint of step 2"));
}
