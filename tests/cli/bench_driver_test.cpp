// The driver every `hpctrain bench` mode times with (src/cli/bench_driver.h): warm-up rounds
// untimed, then each case once per round in alternating order, each run after its untimed
// `before`; min, median and max of what was timed.
#include "cli/bench_driver.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace hpctrain::cli {
namespace {

TEST(BenchDriver, CasesRunInTurnAlternatingTheirOrderAfterTheWarmUp) {
  std::string order;
  const auto mark = [&order](char c) { return [&order, c] { order += c; }; };
  const auto seconds = time_in_turn({{"a", mark('a'), mark('1')}, {"b", mark('b'), mark('2')}, {"c", mark('c')}},
                                    {/*warmup=*/2, /*timed=*/3});
  // Two warm-up rounds in order, then a b c, c b a, a b c; every run after its `before`.
  EXPECT_EQ(order, "1a2bc" "1a2bc" "1a2bc" "c2b1a" "1a2bc");
  ASSERT_EQ(seconds.size(), 3u);
  for (const auto& s : seconds) EXPECT_EQ(s.size(), 3u);
}

TEST(BenchDriver, OnlyTheRunIsTimed) {
  const auto sleep_ms = [](int ms) { return [ms] { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }; };
  const auto seconds = time_in_turn({{"short", sleep_ms(1), sleep_ms(40)}}, {0, 2});
  for (const double s : seconds[0]) {
    EXPECT_GE(s, 0.001);
    EXPECT_LT(s, 0.040) << "the 40 ms before the run was timed with it";
  }
}

TEST(BenchDriver, SpreadIsMinMedianAndMaxAndDifferencesPairRounds) {
  const Spread spread = spread_of({0.3, 0.1, 0.5, 0.2, 0.4});
  EXPECT_DOUBLE_EQ(spread.min, 0.1);
  EXPECT_DOUBLE_EQ(spread.median, 0.3);
  EXPECT_DOUBLE_EQ(spread.max, 0.5);
  EXPECT_EQ(differences({3.0, 5.0}, {1.0, 1.5}), (std::vector<double>{2.0, 3.5}));
}

}  // namespace
}  // namespace hpctrain::cli
