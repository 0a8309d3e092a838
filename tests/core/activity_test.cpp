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
    Snapshot inner;
    {
      const Scope waiting(Kind::kLoader);
      inner = now();
      EXPECT_EQ(inner.kind, Kind::kLoader);
    }
    const Snapshot back = now();
    EXPECT_EQ(back.kind, Kind::kStep);
    // The step's clock again, which began 30 ms before the loader's.
    EXPECT_GE(back.seconds_in, 0.03 + inner.seconds_in);
  }
  EXPECT_EQ(now().kind, outside);
  enter(Kind::kFinishing);
  EXPECT_EQ(now().kind, Kind::kFinishing);
  EXPECT_STREQ(describe(static_cast<Kind>(99)), "in an unknown activity");
}

TEST(Activity, CountsCollectivesAndKeepsTheStep) {
  const std::int64_t before = now().collectives;
  EXPECT_EQ(count_collective(), before + 1);
  EXPECT_EQ(count_collective(), before + 2);
  EXPECT_EQ(now().collectives, before + 2);
  set_step(42);
  EXPECT_EQ(now().step, 42);
}

TEST(Activity, Names) {
  EXPECT_EQ(std::string(name(Kind::kLoader)), "loader");
  EXPECT_EQ(std::string(name(Kind::kCheckpoint)), "checkpoint");
  EXPECT_EQ(std::string(name(Kind::kCheckpointWait)), "checkpoint-wait");
  EXPECT_EQ(std::string(describe(Kind::kLoader)), "waiting for the loader");
  EXPECT_EQ(std::string(describe(Kind::kCheckpoint)), "writing a checkpoint");
}

TEST(Activity, LimitsAreNoneUntilSetAndNameTheirOption) {
  EXPECT_EQ(limit(Kind::kEvaluation).seconds, 0.0);
  EXPECT_STREQ(limit(Kind::kEvaluation).option, "");
  set_limit(Kind::kCheckpoint, 12.5, "ckpt.write_timeout_s");
  EXPECT_EQ(limit(Kind::kCheckpoint).seconds, 12.5);
  EXPECT_STREQ(limit(Kind::kCheckpoint).option, "ckpt.write_timeout_s");
  EXPECT_EQ(limit(Kind::kLoader).seconds, 0.0);
  EXPECT_EQ(limit(static_cast<Kind>(99)).seconds, 0.0);
  set_limit(Kind::kCheckpoint, 0, "");
}

}  // namespace
}  // namespace hpctrain::activity
