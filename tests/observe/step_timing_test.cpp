#include "hpctrain/observe/step_timing.h"

#include <gtest/gtest.h>

namespace hpctrain::observe {
namespace {

TEST(StepTiming, BreakdownIsPerStepAndComputeIsTheRest) {
  IntervalTimes times;
  times.steps = 4;
  times.data_s = 0.02;
  times.comm_s = 0.1;
  const StepBreakdown b = breakdown(times, 0.4);
  EXPECT_DOUBLE_EQ(b.step_ms, 100.0);
  EXPECT_DOUBLE_EQ(b.data_ms, 5.0);
  EXPECT_DOUBLE_EQ(b.comm_ms, 25.0);
  EXPECT_DOUBLE_EQ(b.compute_ms, 70.0);
  EXPECT_DOUBLE_EQ(breakdown(IntervalTimes{}, 1.0).step_ms, 0.0);  // no step: nothing to divide
  times.reset();
  EXPECT_EQ(times.steps, 0);
  EXPECT_EQ(times.comm_s, 0.0);
}

TEST(StepTiming, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(44.6), "45s");
  EXPECT_EQ(format_duration(192), "3m12s");
  EXPECT_EQ(format_duration(3600 * 2 + 5 * 60 + 59), "2h05m");
  EXPECT_EQ(format_duration(-3), "0s");
}

}  // namespace
}  // namespace hpctrain::observe
