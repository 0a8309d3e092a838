// main() of the MPI test binary: one Bootstrap for the whole run; only rank 0 prints GoogleTest's
// output, and the exit code is non-zero on every rank if any rank failed a test; rank 0 names the
// tests that skipped themselves when none failed (skip_report.h).
#include <gtest/gtest.h>

#include "hpctrain/comm/bootstrap.h"
#include "mpi_fixture.h"
#include "skip_report.h"

namespace hpctrain::testing {

comm::Bootstrap* g_bootstrap = nullptr;

}  // namespace hpctrain::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  hpctrain::comm::Bootstrap bootstrap(&argc, &argv);
  hpctrain::testing::g_bootstrap = &bootstrap;
  bootstrap.watch_ranks(/*timeout_s=*/60);  // as hpctrain's commands do: blocking collectives need it
  if (bootstrap.world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  const bool all_passed = bootstrap.all_true(rc == 0);
  if (rc != 0) std::fprintf(stderr, "rank %d: tests failed\n", bootstrap.world_rank());
  if (all_passed && bootstrap.world_rank() == 0) hpctrain::testing::print_skipped_tests();
  return all_passed ? 0 : 1;
}
