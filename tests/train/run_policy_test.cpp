// RunPolicy's decisions after a step: records, the last step, periodic checkpoints and evaluations.
#include "hpctrain/train/run_policy.h"

#include <gtest/gtest.h>

#include "fake_communicator.h"
#include "hpctrain/config/parser.h"

namespace hpctrain::train {
namespace {

using testing::FakeCommunicator;
using testing::FakeWorld;

config::Config policy_config() {
  return config::resolve("", {{"data.path", "/unused"},
                              {"log.every_steps", "3"},
                              {"train.max_steps", "10"},
                              {"ckpt.every_steps", "4"},
                              {"train.eval_every", "5"}});
}

TEST(RunPolicy, RecordsEveryLogIntervalAndTheLastStep) {
  FakeWorld world(1);
  FakeCommunicator control(world, 0);
  const RunPolicy policy(policy_config(), control);
  EXPECT_FALSE(policy.records(1, false));
  EXPECT_TRUE(policy.records(3, false));
  EXPECT_TRUE(policy.records(4, true)) << "the last step of an epoch or run is recorded";
  EXPECT_FALSE(policy.is_last(9, false));
  EXPECT_TRUE(policy.is_last(10, false)) << "train.max_steps=10";
  EXPECT_TRUE(policy.is_last(2, true));
  EXPECT_FALSE(policy.limit_reached(9));
  EXPECT_TRUE(policy.limit_reached(10));
}

TEST(RunPolicy, CheckpointsAndEvaluatesWhenDueButNotAtAnEpochsEnd) {
  FakeWorld world(1);
  FakeCommunicator control(world, 0);
  RunPolicy policy(policy_config(), control);
  std::vector<std::int64_t> checkpoints;
  std::vector<std::int64_t> evaluations;
  for (std::int64_t step = 1; step <= 10; ++step) {
    const AfterStep next = policy.after_step(step, policy.is_last(step, false));
    EXPECT_FALSE(next.stop);
    if (next.checkpoint) checkpoints.push_back(step);
    if (next.evaluate) evaluations.push_back(step);
  }
  EXPECT_EQ(checkpoints, (std::vector<std::int64_t>{4, 8}));
  EXPECT_EQ(evaluations, (std::vector<std::int64_t>{5})) << "step 10 is the last: the epoch's end evaluates";
}

}  // namespace
}  // namespace hpctrain::train
