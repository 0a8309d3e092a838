// One rank's report of what its training thread is doing (core/activity.h), as the rank watch
// sends it to the next rank and exchanges it among all ranks (Note [Rank watch], Note [Report
// exchange]), and the text a collective's timeout adds from every rank's reports. Private to
// src/comm; depends on std and core only, so its text is unit-tested without MPI.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::comm {

// Sent as raw bytes: fixed-size fields, no padding.
struct RankReport {
  std::int64_t step = 0;
  std::int64_t collectives = 0;  // issued by the rank
  double seconds_in = 0;         // in its current activity
  std::int32_t kind = 0;         // an activity::Kind
  std::int32_t leaving = 0;      // 1: the rank ends normally
};
static_assert(sizeof(RankReport) == 32, "RankReport travels as 32 raw bytes");

// The silence after which the watch names a rank, and its beat: several per timeout, so one late
// beat is never mistaken for silence.
double silence_limit_s(double timeout_s);
double beat_period_s(double timeout_s);

// This rank's report now.
RankReport report_now(bool leaving);

// "step 12, waiting for the loader for 2.9 s, 56 collectives issued".
std::string describe(const RankReport& report);

// Every rank's reports from one exchange, and how old they are.
struct ExchangedReports {
  std::vector<RankReport> reports;  // by world rank
  std::vector<std::string> hosts;   // by world rank
  int self = 0;
  double age_s = 0;      // since this rank contributed its own
  bool stalled = false;  // no exchange has completed for several periods: a rank is dead or frozen
};

// For a collective's timeout message, given this rank's count of collectives issued now: the rank
// other than this one that had issued the fewest at the exchange, if it had issued fewer than
// `mine`: "; rank 2 (node7) was furthest behind at the last exchange of reports, 0.3 s ago: step
// 12, in a training step for 299.7 s, 56 collectives issued (this rank now: 57)"; else that no
// rank was behind. "" when there are no reports.
std::string lagging_rank_text(const ExchangedReports& exchanged, std::int64_t mine);

}  // namespace hpctrain::comm
