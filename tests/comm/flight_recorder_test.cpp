// The flight recorder (comm/flight_recorder.h): the ring keeps the last N collectives with their
// states, a dump reads back as written; and where dumps first disagree (comm/flight_analysis.h):
// a rank that never issued a collective, one that skipped one, a desync of sizes, a collective not
// complete everywhere, dumps that are missing, files that are not dumps.
#include "hpctrain/comm/flight_analysis.h"
#include "hpctrain/comm/flight_recorder.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::comm::flight {
namespace {

Record call(std::int64_t number, const std::string& op, std::int64_t bytes, State state = State::kCompleted,
            std::int64_t bucket = -1) {
  Record r;
  r.number = number;
  r.op = op;
  r.bytes = bytes;
  r.dtype = "Float";
  r.bucket = bucket;
  r.state = state;
  return r;
}

// Ranks that issued the same calls `from`..`to`: a broadcast, then allreduces of buckets 0 and 1.
RankDump alike(int rank, std::int64_t from, std::int64_t to) {
  RankDump d;
  d.rank = rank;
  d.host = "node" + std::to_string(rank);
  for (std::int64_t n = from; n <= to; ++n) {
    d.records.push_back(n % 3 == 0 ? call(n, "broadcast", 16) : call(n, "allreduce", 1000 * (n % 3), State::kCompleted, n % 3 - 1));
  }
  return d;
}

TEST(FlightAnalysis, NamesTheRankThatNeverIssuedACollective) {
  const std::string where = first_disagreement({alike(0, 1, 12), alike(1, 1, 9), alike(2, 1, 12)}, 3);
  EXPECT_NE(where.find("collective #10 (allreduce of 1000 bytes Float, bucket 0): rank 1 never issued it"),
            std::string::npos)
      << where;
  EXPECT_NE(where.find("rank 1's last: #9, broadcast of 16 bytes Float, completed"), std::string::npos) << where;
  EXPECT_NE(where.find("ranks 0,2 did"), std::string::npos) << where;
}

TEST(FlightAnalysis, NamesTheRankWhoseSizeDiffers) {
  std::vector<RankDump> dumps{alike(0, 1, 8), alike(1, 1, 8), alike(2, 1, 8)};
  dumps[2].records[6].bytes -= 4;  // #7
  const std::string where = first_disagreement(dumps, 3);
  EXPECT_NE(where.find("collective #7 differs between ranks (a desync): ranks 0,1 issued allreduce of 1000 bytes "
                       "Float, bucket 0; rank 2 issued allreduce of 996 bytes Float, bucket 0"),
            std::string::npos)
      << where;
}

TEST(FlightAnalysis, NamesTheRankThatSkippedACollective) {
  RankDump skipper = alike(1, 1, 8);
  skipper.records.erase(skipper.records.begin() + 3);  // never issued #4: its later ones come one early
  for (size_t i = 3; i < skipper.records.size(); ++i) --skipper.records[i].number;
  const std::string where = first_disagreement({alike(0, 1, 8), skipper}, 2);
  EXPECT_NE(where.find("rank 1 skipped collective #4 (allreduce of 1000 bytes Float, bucket 0): its #4 "
                       "(allreduce of 2000 bytes Float, bucket 1) is the others' #5"),
            std::string::npos)
      << where;
}

TEST(FlightAnalysis, AgreeingRanksNameTheFirstUnfinishedCollectiveAndMissingDumps) {
  std::vector<RankDump> dumps{alike(0, 5, 9), alike(2, 1, 9)};
  dumps[1].records.back().state = State::kStarted;
  const std::string where = first_disagreement(dumps, 3);
  EXPECT_EQ(where, "every rank issued collective #9 (broadcast of 16 bytes Float) alike; it is not complete on "
                   "rank 2 (started); no dump from rank 1 (dead, frozen, or too slow to write)");
  EXPECT_EQ(first_disagreement({alike(0, 1, 4), alike(1, 2, 4)}, 2), "");
}

TEST(FlightAnalysis, ADumpReadsBackAndWhatIsNotOneIsRefused) {
  RankDump d = alike(3, 1, 4);
  d.reason = "collective #4 timed out";
  d.capacity = 8;
  d.records[1].issued_us = 1.5e15;
  d.records[1].started_us = 1.5e15 + 2;
  const RankDump back = parse_dump(dump_text(d), "rank-3.json");
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.reason, d.reason);
  ASSERT_EQ(back.records.size(), 4u);
  EXPECT_EQ(back.records[1].bucket, 1);
  EXPECT_DOUBLE_EQ(back.records[1].started_us, 1.5e15 + 2);
  EXPECT_EQ(back.records[3].state, State::kCompleted);

  const auto refusal = [](const std::string& text) {
    try {
      parse_dump(text, "flight/rank-0.json");
    } catch (const ConfigError& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal("{").find("flight/rank-0.json: not JSON"), std::string::npos);
  EXPECT_NE(refusal(R"({"rank":0,"host":"h","reason":"r","capacity":1})").find("'records' is missing"),
            std::string::npos);
  const std::string head = R"({"rank":0,"host":"h","reason":"r","capacity":1,"records":[)";
  const std::string record = R"({"number":2,"op":"a","bytes":1,"dtype":"F","bucket":-1,"issued_us":1,)"
                             R"("started_us":-1,"ended_us":-1,"state":"issued"})";
  EXPECT_EQ(refusal(head + record + "]}"), "accepted");
  EXPECT_NE(refusal(head + record + "," + record + "]}").find("increasing number"), std::string::npos);
  std::string bad_state = record;
  bad_state.replace(bad_state.find("issued\"}"), 6, "asleep");
  EXPECT_NE(refusal(head + bad_state + "]}").find("'asleep' is not a collective's state"), std::string::npos);
}

TEST(FlightRecorder, KeepsTheLastCollectivesWithTheirStatesAndDumpsThem) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hpctrain-flight-test-" + std::to_string(::getpid()))).string();
  configure(4, dir, 5, 10.0);
  std::int64_t first = 0;
  std::int64_t last = 0;
  for (int i = 0; i < 6; ++i) {
    last = issue(i % 2 ? "allreduce" : "broadcast", 8 * i, "Float");
    if (first == 0) first = last;
    start(last);
    if (i < 5) end(last, /*ok=*/i != 3);
  }
  { const Blocking control("barrier (control)", 0, "none"); }
  const std::string path = dump("a test");
  ASSERT_EQ(path, dir + "/rank-5.json");
  const std::vector<RankDump> dumps = read_dumps(dir, /*strict=*/true);
  ASSERT_EQ(dumps.size(), 1u);
  EXPECT_EQ(dumps[0].reason, "a test");
  ASSERT_EQ(dumps[0].records.size(), 4u);  // the ring's size
  EXPECT_EQ(dumps[0].records[0].number, first + 3);
  EXPECT_EQ(dumps[0].records[0].state, State::kFailed);
  EXPECT_EQ(dumps[0].records[2].number, last);
  EXPECT_EQ(dumps[0].records[2].state, State::kStarted);
  EXPECT_EQ(dumps[0].records[2].bytes, 40);
  EXPECT_EQ(dumps[0].records[3].op, "barrier (control)");
  EXPECT_EQ(dumps[0].records[3].state, State::kCompleted);
  EXPECT_GT(dumps[0].records[3].ended_us, 0);
  configure(0, dir, 5, 10.0);  // off: nothing kept, nothing dumped
  EXPECT_EQ(dump("off"), "");
  sys::remove_tree(dir);
}

}  // namespace
}  // namespace hpctrain::comm::flight
