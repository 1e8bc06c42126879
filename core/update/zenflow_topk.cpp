// zenflow_topk.cpp: topk_ratio = "auto" (zenflow.hpp). At the first selection the first step's
// forward and backward have shown their peak; the largest fraction of columns whose compact master,
// moments, index and gathered gradient fit what is left where the model computes, less a tenth
// for fragmentation, is chosen, the same on every rank (the smallest), and kept in checkpoints.
//
// The token embedding is a matrix of tokens to selectors (flat_buffers.cpp), but stays wholly the
// device's, as it learns much slower when most tokens wait for the CPU (the quickstart from scratch
// with its tokens chosen at topk 0.1: held-out loss 1.27x AdamW's, against 1.04x with it whole),
// unless "auto" finds it does not fit whole beside the least of the weights' columns: then its tokens
// are chosen among like any weight's columns, on every rank.
//
// At the first selection of a run from scratch with a fraction below 1, rank 0 also says what that
// costs in learning and what to use instead (advise_from_scratch).
#include "update/zenflow.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "update/device_room.hpp"

#include <algorithm>
#include <cstdio>

namespace zf {

namespace {

// ZenFlow is a fine-tuning method: from scratch the columns the CPU updates once per interval fall
// behind (docs/zenflow.md, "Learning per step"), which a user who pretrains should hear.
void advise_from_scratch(const ZenFlowOptions &options) {
  if (!options.from_scratch || options.topk_ratio >= 1) return;
  std::printf("zfcore: [zenflow] from scratch (no model.init_from) at topk_ratio %.3g: the other %.0f%% of the "
              "columns take one CPU step per interval, so ZenFlow learns less per step than AdamW (measured at topk "
              "0.1, update_interval 4: 1.13-1.49x AdamW's held-out loss at equal steps; docs/zenflow.md). To "
              "pretrain, keep every column where the model computes (topk_ratio = 1, or \"auto\" where they fit) or "
              "offload without [zenflow] (offload.ratio: AdamW's math)\n",
              options.topk_ratio, 100 * (1 - options.topk_ratio));
}

}  // namespace

// The compact copies of one selected element, as use_selection and update_selected hold them.
uint64_t ZenFlow::selected_element_bytes() const {
  return zf::selected_element_bytes(master_and_state_bytes(state_specs_), c10::elementSize(buffers_.dtype)).total();
}

void ZenFlow::choose_topk() {
  if (options_.topk_ratio != 0) {  // the user's fraction
    if (buffers_.runtime.comm->rank() == 0) advise_from_scratch(options_);
    std::fflush(stdout);
    return;
  }
  const DeviceRoom room = device_room(buffers_.runtime, buffers_.model_tier);
  double topk = 0.1;
  std::string why = "a CPU run without run.device_memory_limit_gb: the reference's 0.1";
  bool rows = false;
  if (room.known) {
    // The embedding whole beside the weights' topk, if at least the least of their columns fits;
    // else its tokens among the columns.
    const AutoTopk chosen = auto_topk(shard_elements(layout_, buffers_.shard_begin, buffers_.shard_end),
                                      room.left / selected_element_bytes());
    topk = chosen.topk;
    rows = chosen.table_rows;
    why = format("%s; the selected columns need %llu bytes an element%s", room.why.c_str(),
                 (unsigned long long)selected_element_bytes(),
                 rows ? "; the whole embedding does not fit beside them: its tokens are chosen among too" : "");
  }
  Communicator &comm = *buffers_.runtime.comm;
  options_.topk_ratio = smallest_over_ranks(comm, topk);
  table_rows_ = smallest_over_ranks(comm, rows ? 0.0 : 1.0) == 0.0;  // one rank's embedding is every rank's choice
  if (comm.rank() == 0) {
    std::printf("zfcore: zenflow.topk_ratio = auto chose %.4g%s (rank 0: %s)\n", options_.topk_ratio,
                options_.topk_ratio >= 1 ? ": every column where the model computes, as AdamW" : "", why.c_str());
    // The same memory holds more of a contiguous part (docs/zenflow.md, "When the state does not fit").
    if (room.known && options_.topk_ratio < 1) {
      const double share = room.share(master_and_state_bytes(state_specs_), buffers_.numel());
      std::printf("zfcore: without [zenflow], offload.ratio = \"auto\" would keep about %.0f%% of this rank's "
                  "optimizer state here, updated as AdamW does; `zfcore bench convergence` compares the two\n",
                  100 * share);
    }
    advise_from_scratch(options_);
    std::fflush(stdout);
  }
}

}  // namespace zf
