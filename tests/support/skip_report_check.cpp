// For tests/lint/skips_reach_ctest.sh: a test that skips itself beside one that passes, and one
// (disabled unless asked) that fails, in a binary with the e2e suites' main() (skip_report.h).
#include <gtest/gtest.h>

TEST(SkipReport, Passes) { EXPECT_EQ(1 + 1, 2); }

TEST(SkipReport, Skips) { GTEST_SKIP() << "as the e2e suites skip where npm or a memory cgroup is missing"; }

TEST(SkipReport, DISABLED_Fails) { ADD_FAILURE() << "asked for with --gtest_also_run_disabled_tests"; }
