#include "report/rank_timers.hpp"

namespace zf {

void gather_rank_timers(Communicator &comm, StepRecord &r) {
  int64_t count[1] = {int64_t(r.timers_ms.size())};
  comm.all_reduce(zf_tensor_view{count, 1, ZF_DTYPE_I64, ZF_DEVICE_CPU, 0, 0}, ZF_REDUCE_MAX, nullptr);
  const size_t n = size_t(count[0]) + 1, world = size_t(comm.world_size());
  std::vector<double> mine(n, -1.0), all(n * world);
  mine[0] = r.step_ms;
  for (size_t i = 0; i < r.timers_ms.size(); ++i) mine[i + 1] = r.timers_ms[i].second;
  comm.all_gather(zf_tensor_view{mine.data(), n, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0},
                  zf_tensor_view{all.data(), n * world, ZF_DTYPE_F64, ZF_DEVICE_CPU, 0, 0}, nullptr);
  r.rank_step_ms.clear();
  r.rank_timers_ms.clear();
  for (size_t rank = 0; rank < world; ++rank) r.rank_step_ms.push_back(all[rank * n]);
  for (size_t i = 0; i < r.timers_ms.size(); ++i) {
    std::vector<double> by_rank;
    for (size_t rank = 0; rank < world; ++rank) by_rank.push_back(all[rank * n + i + 1]);
    r.rank_timers_ms.emplace_back(r.timers_ms[i].first, std::move(by_rank));
  }
}

}  // namespace zf
