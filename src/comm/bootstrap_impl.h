// Bootstrap's MPI state, shared with the MPI communicator. Private to src/comm.
#pragma once

#include <mpi.h>

#include "hpctrain/comm/bootstrap.h"

namespace hpctrain::comm {

struct Bootstrap::Impl {
  MPI_Comm world = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD owned by hpctrain
  MPI_Comm local = MPI_COMM_NULL;  // the ranks of this node
  bool owns_mpi = false;           // we called MPI_Init, so we call MPI_Finalize
};

}  // namespace hpctrain::comm
