// offload_floor.hpp: how close an offloaded step is to its physical limit, the floor column of
// `zfcore bench offload` and `zfcore bench scale`. The suite measures, in its own process before
// the rows run, the host's memory bandwidth (an Adam-shaped stream on every core the runs may use),
// and on a GPU, once the rows are done, the PCIe rate each way (pinned copies). A row's floor is
// the longest of: the bytes its CPU optimizer streams per step (summary.json's host_update_bytes;
// the ranks of the host share its bandwidth) over the first, its gradient bytes down and its
// parameter bytes up per step over the PCIe rates; and the GPU's own work per step. That last is,
// in the offload suite, the `none` row's step on a GPU (a row that keeps part of the update on the
// GPU, offload.ratio = auto, can be no faster than the step without offload; on a CPU that row is
// as noisy as the row it would judge, and no other row's step counts); in the scale suite, whose
// model does not fit without offload, each row's own forward and backward (`fwd` + `bwd`, their
// collectives inside).
#pragma once

#include "bench/suite.hpp"

namespace zf::bench {

// The host's Adam-shaped memory bandwidth (before the rows: on the idle machine).
LinkRates measure_host_rate();
// PCIe each way into `rates` (after the rows: this process then creates its CUDA context, which
// the rows' GPU must not hold while they run). Zero, with the reason on stderr, if it cannot.
void measure_pcie(LinkRates &rates);

// The row's floor in ms; 0 when it moves nothing (no offload) or a rate is unknown. compute_ms:
// the GPU's step without offload (0: not measured, or a CPU run).
double floor_ms(const RowResult &row, const LinkRates &rates, int ranks, double compute_ms);

// Whether `suite` has the floor column (its rows offload: offload, scale).
bool has_floor(const std::string &suite);
// Every ok row's floor_ms, with the GPU's own work as has_floor's suite takes it (above).
void set_floors(std::vector<RowResult> &rows, const SuiteOptions &options, const LinkRates &rates);
// The line under a table with the floor column: what the floor is, with the rates measured.
std::string floor_note(const SuiteOptions &options, const LinkRates &rates);

}  // namespace zf::bench
