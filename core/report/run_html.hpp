// run_html.hpp: OUTPUT_DIR/report.html, a picture of a run that opens anywhere (one file: inline CSS
// and SVG, nothing fetched, as the bench reports): the training and held-out loss over steps and
// over training time, the learning rate, the step time with its spikes marked, and the memory of
// each tier over the steps. RunReport writes it at every checkpoint and at the end.
#pragma once

#include <zf/zf_plugin.h>

#include <array>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace zf {

struct StepRecord;

// What the page draws of a step (a row of steps.jsonl).
struct RunPoint {
  int64_t step = 0;
  double loss = 0, eval_loss = -1, lr = 0, step_ms = 0;  // eval_loss -1: no evaluation at this step
  std::array<uint64_t, ZF_TIER_COUNT> memory{};
  uint64_t gpu_peak = 0;  // the CUDA allocator's peak in the step (GPU runs)
};

RunPoint run_point(const StepRecord &record);
// The rows of a steps.jsonl (a resumed run's earlier steps); a line that does not parse is skipped.
std::vector<RunPoint> read_run_points(const std::filesystem::path &steps_jsonl);

// A step is a spike when it took more than this many times the median step.
constexpr double kSpikeFactor = 2.0;

// The page; `title` names the run (its output directory). resumed_step > 0: the run resumed from the
// checkpoint of that step, said on the page and marked on the loss charts.
std::string run_html(const std::string &title, const std::vector<RunPoint> &points, int64_t resumed_step = 0);

}  // namespace zf
