// affinity.hpp: which cores this process may run on, and how a rank shares them between its
// training thread and the optimizer workers of its plugins.
#pragma once

#include <string>
#include <vector>

namespace zf {

std::vector<int> allowed_cores();  // from the process's affinity mask, ascending
// One logical CPU per physical core (SMT siblings folded, by the kernel's topology), of `cores`.
std::vector<int> physical_cores(const std::vector<int> &cores);

struct CoreBinding {
  std::vector<int> trainer;  // the training thread (and its intra-op threads)
  std::vector<int> workers;  // plugin worker threads (the CPU optimizer)
  bool shared = false;       // fewer cores than ranks: ranks share cores
};
// Rank local_rank of local_size on this host takes a disjoint, contiguous share of `physical`.
// A GPU run gives the training thread 1 core (2 from 8 cores up), or trainer_fraction of the share
// when > 0 (ZenFlow's pt_reserved_cores_perc; at least one core each), and the workers the rest; a
// CPU run computes the model on the host, so trainer and workers both get the whole share.
CoreBinding split_cores(const std::vector<int> &physical, int local_rank, int local_size, bool gpu_run,
                        double trainer_fraction = 0);
// ZenFlow's trainer_fraction: zenflow.pt_reserved_cores_perc when > 0, else (0, automatic) three
// quarters of the share when several ranks share the host, 0 (split_cores' one or two cores) for a
// rank alone. Several ranks' optimizer workers together saturate the host's memory while each
// training thread launches its forward beside them: on 2 H200 (16 cores a rank) ZenFlow's step
// was shortest with 4 workers a rank, which still finish the CPU update inside the step (8 or 12
// slowed the forward); a rank alone updates twice the columns and needs every worker it has.
double zenflow_trainer_fraction(double configured, int local_size);
// Pins the calling thread to cores; false when the kernel refuses.
bool pin_this_thread(const std::vector<int> &cores);
std::string core_list(const std::vector<int> &cores);  // "0-3,8"

}  // namespace zf
