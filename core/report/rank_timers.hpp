// rank_timers.hpp: run.rank_timers, every rank's step time and timers gathered into the step's
// record, so that steps.jsonl shows which rank a slow step waited for, and on what.
#pragma once

#include "comm/communicator.hpp"
#include "report/report.hpp"

namespace zf {

// Collective: every rank calls it with its own record of the step. Fills rank_step_ms and
// rank_timers_ms (in this rank's order of timer names; every rank registers the same timers in the
// same order, and one that a rank lacks reads -1).
void gather_rank_timers(Communicator &comm, StepRecord &record);

}  // namespace zf
