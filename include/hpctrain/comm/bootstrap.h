// The control plane: MPI start and end, who this process is (world, node-local, node), the host names
// of all ranks, small byte-level collectives for set-up (e.g. the NCCL unique id), and abort.
// Depends on core only; mpi.h stays in src/comm (pimpl), so including this costs nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/comm/control_plane.h"

namespace hpctrain::comm {

struct Topology {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;  // rank among the processes on this node (MPI_COMM_TYPE_SHARED)
  int local_size = 1;
  int node_rank = 0;  // index of this node, 0..node_count-1, ordered by lowest world rank
  int node_count = 1;
  std::vector<std::string> hosts;  // host name of every world rank
};

class Bootstrap final : public ControlPlane {
 public:
  // Initializes MPI (once per process) and discovers the topology. Collective over MPI_COMM_WORLD.
  // Throws CommError when MPI cannot start.
  Bootstrap(int* argc, char*** argv);
  ~Bootstrap() override;  // MPI_Finalize (collective)
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  const Topology& topology() const { return topology_; }
  int world_rank() const override { return topology_.world_rank; }
  int world_size() const override { return topology_.world_size; }

  // Collective: every rank calls it, in the same order.
  void barrier() const override;
  // Collective: `bytes` on `root` is copied to every rank (resized there).
  void broadcast_bytes(std::vector<std::uint8_t>& bytes, int root) const override;
  // Collective: every rank's string, indexed by world rank.
  std::vector<std::string> allgather_string(const std::string& value) const override;
  // Collective: the logical AND of every rank's flag.
  bool all_true(bool flag) const;
  // Collective: element-wise sum over all ranks of `count` floats in host memory, in place, by one
  // blocking MPI_Allreduce: the reference `hpctrain bench comm` measures communicators against.
  void allreduce_sum(float* values, std::int64_t count) const override;
  // A control plane over a duplicate of the world; nullptr without MPI_THREAD_MULTIPLE.
  std::unique_ptr<ControlPlane> duplicate() const override;

  // Collective: starts the rank watch (Note [Rank watch] in src/comm/rank_watch.h): a rank silent
  // for `timeout_s`, or this rank past an activity's limit (activity::set_limit), ends the job
  // with exit code 5, named. Nothing with one rank, or where MPI gives no MPI_THREAD_MULTIPLE (a
  // warning says so).
  void watch_ranks(double timeout_s);
  // True once watch_ranks() has started a watch.
  bool watching_ranks() const;
  // Whether MPI started with MPI_THREAD_MULTIPLE (duplicate() and the rank watch need it).
  bool thread_multiple() const;

  // Ends every process of the job with `exit_code` (MPI_Abort while MPI runs); never returns.
  [[noreturn]] static void abort_job(int exit_code);
  // The world size while MPI is initialized and not finalized, else 0. Note [Unwinding]: a
  // Bootstrap destroyed by an exception leaves MPI running, so main() can still abort the job
  // instead of hanging in MPI_Finalize while other ranks wait in a collective.
  static int running_world_size();
  // MPI_Finalize if MPI runs (for a single-rank job ending on an error); no-op otherwise.
  static void finalize_if_running();

  // MPI's own version text; valid before MPI_Init.
  static std::string mpi_library_version();
  // This process's rank as the launcher (mpirun, srun) announces it in the environment, for use
  // before MPI starts (e.g. to print a config error once); 0 when not launched as a rank.
  static int launcher_rank();
  // How many ranks the launcher started, from its environment; 0 when not launched as a rank.
  static int launcher_world_size();

  struct Impl;  // holds the MPI communicators; visible to src/comm only
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
  Topology topology_;
};

}  // namespace hpctrain::comm
