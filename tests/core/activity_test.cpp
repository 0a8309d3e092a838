#include "hpctrain/core/activity.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

namespace hpctrain::activity {
namespace {

TEST(Activity, ScopesNestAndRestoreTheActivityAndItsClock) {
  const Kind outside = now().kind;
  {
    const Scope stepping(Kind::kStep);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    {
      const Scope waiting(Kind::kLoader);
      const Snapshot inner = now();
      EXPECT_EQ(inner.kind, Kind::kLoader);
      EXPECT_LT(inner.seconds_in, 0.025);  // its own clock, not the step's
    }
    const Snapshot back = now();
    EXPECT_EQ(back.kind, Kind::kStep);
    EXPECT_GE(back.seconds_in, 0.03);  // the step's clock again
  }
  EXPECT_EQ(now().kind, outside);
}

TEST(Activity, CountsCollectivesAndKeepsTheStep) {
  const std::int64_t before = now().collectives;
  EXPECT_EQ(count_collective(), before + 1);
  EXPECT_EQ(count_collective(), before + 2);
  EXPECT_EQ(now().collectives, before + 2);
  set_step(42);
  EXPECT_EQ(now().step, 42);
}

TEST(Activity, NamesAndWhichActivitiesNothingElseTimes) {
  EXPECT_EQ(std::string(name(Kind::kLoader)), "loader");
  EXPECT_EQ(std::string(name(Kind::kCheckpoint)), "checkpoint");
  EXPECT_EQ(std::string(describe(Kind::kLoader)), "waiting for the loader");
  EXPECT_TRUE(is_bounded(Kind::kLoader));
  for (const Kind kind : {Kind::kStarting, Kind::kStep, Kind::kCollective, Kind::kCheckpoint, Kind::kEvaluation,
                          Kind::kFinishing}) {
    EXPECT_FALSE(is_bounded(kind)) << name(kind);
  }
}

}  // namespace
}  // namespace hpctrain::activity
