#include "hpctrain/observe/op_profile.h"

#include <gtest/gtest.h>

namespace hpctrain::observe {
namespace {

// An operator's self time is its own less the operators it called, summed per name over the
// threads and steps, as PyTorch's key_averages() sums them; a pop with nothing open (an operator
// entered before the profile) is left out.
TEST(OpProfile, SelfTimesLeaveOutTheOperatorsCalledAndSumPerName) {
  const std::vector<std::vector<OpEvent>> threads{
      {{false, "", 0},                                     // left over from before
       {true, "aten::linear", 0}, {true, "aten::addmm", 1000}, {false, "", 3000},
       {true, "aten::addmm", 4000}, {false, "", 5000}, {false, "", 10000}},
      {{true, "aten::addmm", 0}, {false, "", 500}}};
  const std::vector<OpTime> times = sum_op_times(threads);
  ASSERT_EQ(times.size(), 2u);
  EXPECT_EQ(times[0].name, "aten::linear");  // most self time first
  EXPECT_EQ(times[0].calls, 1);
  EXPECT_DOUBLE_EQ(times[0].total_ms, 10.0);
  EXPECT_DOUBLE_EQ(times[0].self_ms, 7.0);
  EXPECT_EQ(times[1].name, "aten::addmm");
  EXPECT_EQ(times[1].calls, 3);
  EXPECT_DOUBLE_EQ(times[1].total_ms, 3.5);
  EXPECT_DOUBLE_EQ(times[1].self_ms, 3.5);
}

}  // namespace
}  // namespace hpctrain::observe
