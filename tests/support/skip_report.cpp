#include "skip_report.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

namespace hpctrain::testing {
namespace {

// The message GTEST_SKIP() was given.
std::string skip_message(const ::testing::TestResult& result) {
  for (int i = 0; i < result.total_part_count(); ++i) {
    const ::testing::TestPartResult& part = result.GetTestPartResult(i);
    if (part.skipped()) return part.message();
  }
  return "";
}

}  // namespace

void print_skipped_tests() {
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  if (unit.failed_test_count() > 0) return;
  for (int s = 0; s < unit.total_test_suite_count(); ++s) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(s);
    for (int t = 0; t < suite.total_test_count(); ++t) {
      const ::testing::TestInfo& test = *suite.GetTestInfo(t);
      if (!test.result()->Skipped()) continue;
      std::printf("SKIP: %s.%s did not run here: %s\n", suite.name(), test.name(),
                  skip_message(*test.result()).c_str());
    }
  }
  std::fflush(stdout);
}

}  // namespace hpctrain::testing
