#include "hpctrain/core/log.h"

#include <gtest/gtest.h>

#include <functional>

#include "hpctrain/core/error.h"

namespace hpctrain::log {
namespace {

std::string console_of(const Identity& who, bool all_ranks, const std::function<void()>& emit) {
  init_console(who, all_ranks, spdlog::level::info);
  ::testing::internal::CaptureStderr();
  emit();
  spdlog::default_logger()->flush();
  return ::testing::internal::GetCapturedStderr();
}

TEST(Log, RankZeroPrintsInfoPlainAndWarningsWithItsRank) {
  const std::string out = console_of({0, 2, "h"}, false, [] {
    info("step {}", 1);
    warn("careful");
  });
  EXPECT_EQ(out, "step 1\n[0/2 h] careful\n");
}

TEST(Log, OtherRanksPrintOnlyWarningsUnlessAllRanks) {
  const auto emit = [] {
    info("progress");
    error("broken");
  };
  EXPECT_EQ(console_of({1, 2, "h"}, false, emit), "[1/2 h] broken\n");
  EXPECT_EQ(console_of({1, 2, "h"}, true, emit), "[1/2 h] progress\n[1/2 h] broken\n");
}

TEST(Log, SingleProcessHasNoPrefix) {
  EXPECT_EQ(console_of({0, 1, "h"}, false, [] { warn("w"); }), "w\n");
}

TEST(Log, WhereNamesRankSizeAndHost) {
  init_console({3, 4, "node7"}, false, spdlog::level::info);
  EXPECT_EQ(where(), "[3/4 node7]");
}

TEST(Log, UnknownLevelIsAConfigError) { EXPECT_THROW(parse_level("loud"), ConfigError); }

}  // namespace
}  // namespace hpctrain::log
