// main() of the test binaries CTest runs as a few entries of many tests each (the e2e suites): a
// test that skipped itself is reported to CTest as a skip (skip_report.h).
#include <gtest/gtest.h>

#include "skip_report.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (rc == 0) hpctrain::testing::print_skipped_tests();
  return rc;
}
