// communicator.hpp: the one communicator interface of the core. Implementations: single process
// (rank 0 of 1), MPI (CPU buffers, started under mpirun) and, in CUDA builds, NCCL bootstrapped
// through MPI. Collectives follow zf_host's contract (zf_plugin.h); errors throw zf::Error.
#pragma once

#include <zf/zf_plugin.h>

#include <memory>
#include <string>

namespace zf {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual int local_rank() const = 0;
  virtual int local_size() const = 0;
  virtual std::string name() const = 0;  // "single", "mpi", "nccl"

  virtual void all_reduce(zf_tensor_view buffer, zf_reduce_op op, void *stream) = 0;
  virtual void reduce_scatter(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op,
                              void *stream) = 0;
  virtual void all_gather(zf_tensor_view send, zf_tensor_view recv, void *stream) = 0;
  virtual void broadcast(zf_tensor_view buffer, int root, void *stream) = 0;
  // Sum of every rank's send into recv on root (plugin ABI 1.1); a communicator without it says so.
  virtual void reduce(zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op, int root, void *stream);
  virtual void barrier() = 0;
  // How long a collective may wait for its peers before this rank ends, naming it (the MPI
  // communicator's watchdog; a communicator without one ignores it).
  virtual void set_timeout_s(double) {}
  // Ends every rank of the job now (after an error on this one), so none waits forever.
  [[noreturn]] virtual void abort(int exit_code) = 0;
};

// Collective: every rank hands in what it found ("" for nothing); every rank gets the finding of the
// lowest rank that found something (its first 1023 bytes), or "". For checks whose message one
// rank has and every rank must act on.
std::string first_finding(Communicator &comm, const std::string &mine);

// True when the process was started by an MPI launcher (mpirun/srun set these variables).
bool launched_under_mpi();
// The communicator for this process: MPI when launched under mpirun, else single.
std::unique_ptr<Communicator> make_cpu_communicator();
// Seconds a collective may take before its rank gives up on its peers: ZF_COMM_TIMEOUT_S, default 600
// (run.comm_timeout_s sets it for a run).
double comm_timeout_s();

}  // namespace zf
