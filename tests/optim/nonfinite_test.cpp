#include "hpctrain/optim/nonfinite.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace hpctrain::optim {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(AllFinite, FindsAnInfOrNaNInAnyGradientAndNamesTheFirst) {
  EXPECT_TRUE(all_finite({}));
  EXPECT_TRUE(all_finite({at::Tensor(), torch::ones({3})}));
  // Finite values whose float32 sum overflows are still finite.
  EXPECT_TRUE(all_finite({torch::full({4}, std::numeric_limits<float>::max())}));
  for (const float bad : {kInf, -kInf, kNaN}) {
    std::vector<at::Tensor> gradients{torch::ones({4}), at::Tensor(), torch::ones({2, 3}), torch::ones({5})};
    gradients[2][1][2] = bad;
    EXPECT_FALSE(all_finite(gradients)) << bad;
    EXPECT_EQ(first_nonfinite(gradients), 2) << bad;
  }
  // +inf and -inf in one tensor sum to NaN, still found.
  EXPECT_FALSE(all_finite({torch::tensor({kInf, -kInf})}));
  EXPECT_EQ(first_nonfinite({torch::ones({2}), torch::ones({2})}), -1);
  // 16-bit gradients (fp16 compression leaves them float32, but a model may keep them so).
  EXPECT_FALSE(all_finite({torch::tensor({1.0f, kInf}).to(torch::kHalf)}));
}

TEST(AllFinite, ScaleAndCheckMultipliesInPlace) {
  std::vector<at::Tensor> gradients{torch::full({3}, 8.0), at::Tensor()};
  EXPECT_TRUE(scale_and_check(gradients, 0.25));
  EXPECT_TRUE(torch::equal(gradients[0], torch::full({3}, 2.0)));
}

TEST(SkippedSteps, SkipsUpToTheLimitInARowThenAborts) {
  SkippedSteps skipped({/*abort_at_once=*/false, /*max_in_a_row=*/2});
  EXPECT_EQ(skipped.after_step(true), NonfiniteAction::kApply);
  EXPECT_EQ(skipped.after_step(false), NonfiniteAction::kSkip);
  EXPECT_EQ(skipped.after_step(false), NonfiniteAction::kSkip);
  EXPECT_EQ(skipped.in_a_row(), 2);
  EXPECT_EQ(skipped.after_step(true), NonfiniteAction::kApply);  // a good step restarts the run
  EXPECT_EQ(skipped.in_a_row(), 0);
  EXPECT_EQ(skipped.after_step(false), NonfiniteAction::kSkip);
  EXPECT_EQ(skipped.after_step(false), NonfiniteAction::kSkip);
  EXPECT_EQ(skipped.after_step(false), NonfiniteAction::kAbort);  // the third in a row: more than 2
  EXPECT_EQ(skipped.total(), 4);
}

TEST(SkippedSteps, AbortAtOnceAndAZeroLimitStopAtTheFirst) {
  SkippedSteps at_once({/*abort_at_once=*/true, /*max_in_a_row=*/20});
  EXPECT_EQ(at_once.after_step(true), NonfiniteAction::kApply);
  EXPECT_EQ(at_once.after_step(false), NonfiniteAction::kAbort);
  SkippedSteps none_allowed({/*abort_at_once=*/false, /*max_in_a_row=*/0});
  EXPECT_EQ(none_allowed.after_step(false), NonfiniteAction::kAbort);
  EXPECT_EQ(none_allowed.total(), 0);
}

TEST(SkippedSteps, StateRoundTripsAndTheRunInARowContinues) {
  SkippedSteps a({false, 2});
  a.after_step(false);
  a.after_step(true);
  a.after_step(false);
  SkippedSteps b({false, 2});
  b.load_state(a.state());
  EXPECT_EQ(b.total(), 2);
  EXPECT_EQ(b.in_a_row(), 1);
  EXPECT_EQ(b.after_step(false), NonfiniteAction::kSkip);
  EXPECT_EQ(b.after_step(false), NonfiniteAction::kAbort);
  SkippedSteps fresh({false, 2});
  fresh.load_state({{"step", torch::full({}, 7, torch::kLong)}});  // a checkpoint without the counts
  EXPECT_EQ(fresh.total(), 0);
}

// Counts from a damaged checkpoint: a NaN, a vector or a negative count is a CheckpointError
// naming the entry (not an error of the tensor library).
TEST(SkippedSteps, DamagedCountsAreCheckpointErrors) {
  SkippedSteps steps({false, 2});
  try {
    steps.load_state({{"skipped_steps", torch::full({}, std::nan(""), torch::kDouble)}});
    FAIL() << "expected an error";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("skipped_steps is not a single non-negative integer"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(steps.load_state({{"skipped_in_a_row", torch::zeros({2}, torch::kLong)}}), CheckpointError);
  EXPECT_THROW(steps.load_state({{"skipped_steps", torch::full({}, -4, torch::kLong)}}), CheckpointError);
}

}  // namespace
}  // namespace hpctrain::optim
