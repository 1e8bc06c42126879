// step_columns.hpp: a step's record as flat columns, the form of steps.csv. Every key of the step's
// steps.jsonl line is a column, in the same order, the nested ones spelled out: "timers_ms": {"fwd"}
// is timer_fwd_ms, "memory_bytes": {"host"} mem_host_bytes, "gpu_peak_bytes": {"allocated"}
// gpu_peak_allocated_bytes, "rank_step_ms": [...] rank0_step_ms, rank1_step_ms, ...,
// "rank_timers_ms": {"fwd": [...]} rank0_timer_fwd_ms, .... Numbers are written as steps.jsonl
// writes them, so the two files agree.
#pragma once

#include "report/report.hpp"

#include <string>
#include <utility>
#include <vector>

namespace zf {

using StepColumns = std::vector<std::pair<std::string, std::string>>;  // name -> value

// The columns this record has (a key the JSON line leaves out, such as eval_loss at a step without
// an evaluation, is not among them).
StepColumns step_columns(const StepRecord &record);

// The step's scalars under the tags the HF Trainer uses where it has one: train/loss,
// train/learning_rate, train/grad_norm, eval/loss, then perf/step_ms, perf/samples_per_s,
// perf/tokens_per_s, memory/<tier>_bytes, memory/gpu_peak_allocated_bytes, and time/<timer>_ms for
// each of the step's timers (fwd, bwd, step, and the offload and ZenFlow ones such as cpu_update).
std::vector<std::pair<std::string, double>> tensorboard_scalars(const StepRecord &record);

// Adds the columns of `record` that `columns` lacks, each after the column it follows in the record
// (an eval_loss first seen at step 100 goes beside loss, not at the end); true if any was added.
bool merge_columns(std::vector<std::string> &columns, const StepColumns &record);

// One CSV line (RFC 4180: a field with a comma, a quote or a line break is quoted) and its inverse.
std::string csv_line(const std::vector<std::string> &fields);
std::vector<std::string> csv_fields(const std::string &line);

// The row of `record` under `columns` (empty cells where the record has no such column).
std::string csv_row(const std::vector<std::string> &columns, const StepColumns &record);

}  // namespace zf
