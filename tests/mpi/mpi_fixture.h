// The MPI test binary's shared Bootstrap (made in mpi_test_main.cpp).
#pragma once

#include "hpctrain/comm/bootstrap.h"

namespace hpctrain::testing {

extern comm::Bootstrap* g_bootstrap;

}  // namespace hpctrain::testing
