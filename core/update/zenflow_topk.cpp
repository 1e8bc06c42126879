// zenflow_topk.cpp: topk_ratio = "auto" (zenflow.hpp). At the first selection the first step's
// forward and backward have shown their peak; the largest fraction of columns whose compact master,
// moments, index and gathered gradient fit what is left where the model computes, less a tenth
// for fragmentation, is chosen, the same on every rank (the smallest), and kept in checkpoints.
#include "update/zenflow.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"
#include "update/device_room.hpp"

#include <algorithm>
#include <cstdio>

namespace zf {

uint64_t ZenFlow::matrix_numel() const {
  uint64_t matrix = 0;
  for (uint32_t i = 0; i < layout_.segment_count; ++i) {
    const zf_segment &seg = layout_.segments[i];
    if (!(seg.flags & ZF_SEGMENT_MATRIX)) continue;
    uint64_t lo = std::max(seg.offset, buffers_.shard_begin), hi = std::min(seg.offset + seg.numel, buffers_.shard_end);
    if (lo < hi) matrix += hi - lo;
  }
  return matrix;
}

// The compact copies of one selected element, as use_selection and update_selected hold them.
uint64_t ZenFlow::selected_element_bytes() const {
  const uint64_t element = c10::elementSize(buffers_.dtype);
  uint64_t bytes = master_and_state_bytes(state_specs_) + 8 /* index */ + element /* gathered gradient */;
  if (buffers_.dtype != torch::kFloat32) bytes += element;  // the compute-precision result
  return bytes;
}

void ZenFlow::choose_topk() {
  const DeviceRoom room = device_room(buffers_.runtime, buffers_.model_tier);
  double topk = 0.1;
  std::string why = "a CPU run without run.device_memory_limit_gb: the reference's 0.1";
  if (room.known) {
    const uint64_t matrix = matrix_numel(), others = buffers_.numel() - matrix;
    const double fits = double(room.left / selected_element_bytes());
    topk = matrix == 0 ? 1.0 : std::clamp((fits - double(others)) / double(matrix), kMinAutoTopk, 1.0);
    why = format("%s; the selected columns need %llu bytes an element", room.why.c_str(),
                 (unsigned long long)selected_element_bytes());
  }
  Communicator &comm = *buffers_.runtime.comm;
  options_.topk_ratio = smallest_over_ranks(comm, topk);
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
    std::fflush(stdout);
  }
}

}  // namespace zf
