#include "comm/rank_report.h"

#include <gtest/gtest.h>

#include "hpctrain/core/activity.h"

namespace hpctrain::comm {
namespace {

RankReport report(std::int64_t step, activity::Kind kind, double seconds_in, std::int64_t collectives) {
  return {step, collectives, seconds_in, static_cast<std::int32_t>(kind), 0};
}

ExchangedReports four_ranks(bool stalled) {
  ExchangedReports exchanged;
  exchanged.reports = {report(12, activity::Kind::kCollective, 2.0, 57),
                       report(12, activity::Kind::kCollective, 1.5, 56),
                       report(11, activity::Kind::kLoader, 2.9, 50),
                       report(12, activity::Kind::kCollective, 2.5, 57)};
  exchanged.hosts = {"n0", "n1", "n2", "n3"};
  exchanged.self = 0;
  exchanged.age_s = stalled ? 4.0 : 0.3;
  exchanged.stalled = stalled;
  return exchanged;
}

TEST(LaggingRankText, NamesTheRankThatHadIssuedTheFewestCollectives) {
  EXPECT_EQ(lagging_rank_text(four_ranks(false), 58),
            "; rank 2 (n2) was furthest behind at the last exchange of reports, 0.3 s ago: step 11, waiting for the "
            "loader for 2.9 s, 50 collectives issued (this rank now: 58)");
}

TEST(LaggingRankText, SaysWhenTheExchangesStopped) {
  EXPECT_EQ(lagging_rank_text(four_ranks(true), 58),
            "; the exchanges of reports stopped 4.0 s ago (is a rank dead or frozen?); rank 2 (n2) was furthest "
            "behind at the last exchange of reports, 4.0 s ago: step 11, waiting for the loader for 2.9 s, 50 "
            "collectives issued (this rank now: 58)");
}

TEST(LaggingRankText, NeverNamesThisRankAndSaysWhenNoRankWasBehind) {
  ExchangedReports exchanged = four_ranks(false);
  exchanged.self = 2;  // the rank with the fewest is this one
  exchanged.reports[2].collectives = 40;
  EXPECT_EQ(lagging_rank_text(exchanged, 56),
            "; at the last exchange of reports, 0.3 s ago, no rank had issued fewer collectives than this one has "
            "now (56): a rank is stuck inside the collective, or the network is");
}

TEST(LaggingRankText, NothingWithoutReports) { EXPECT_EQ(lagging_rank_text(ExchangedReports{}, 3), ""); }

TEST(RankReport, DescribesWhatTheRankWasDoing) {
  EXPECT_EQ(describe(report(2, activity::Kind::kCheckpointWait, 3.14, 10)),
            "step 2, in a checkpoint, waiting for the other ranks for 3.1 s, 10 collectives issued");
}

}  // namespace
}  // namespace hpctrain::comm
