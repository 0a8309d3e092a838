// Bootstrap's MPI state, shared with the MPI communicator. Private to src/comm.
#pragma once

#include <mpi.h>

#include <memory>

#include "hpctrain/comm/bootstrap.h"

namespace hpctrain::comm {

class RankWatch;

struct Bootstrap::Impl {
  MPI_Comm world = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD owned by hpctrain
  MPI_Comm local = MPI_COMM_NULL;  // the ranks of this node
  bool owns_mpi = false;           // we called MPI_Init, so we call MPI_Finalize
  int thread_level = MPI_THREAD_SINGLE;  // what MPI provides
  std::unique_ptr<RankWatch> watch;      // once watch_ranks() started it; stopped before MPI_Finalize
  ~Impl();
};

}  // namespace hpctrain::comm
