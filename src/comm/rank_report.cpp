#include "rank_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "hpctrain/core/activity.h"

namespace hpctrain::comm {

// Below a second, a loaded machine's scheduling alone could look like silence.
double silence_limit_s(double timeout_s) { return std::max(timeout_s, 1.0); }

double beat_period_s(double timeout_s) { return std::clamp(silence_limit_s(timeout_s) / 10, 0.05, 2.0); }

RankReport report_now(bool leaving) {
  const activity::Snapshot now = activity::now();
  return {now.step, now.collectives, now.seconds_in, static_cast<std::int32_t>(now.kind), leaving ? 1 : 0};
}

std::string describe(const RankReport& report) {
  return fmt::format("step {}, {} for {:.1f} s, {} collectives issued", report.step,
                     activity::describe(static_cast<activity::Kind>(report.kind)), report.seconds_in,
                     report.collectives);
}

std::string lagging_rank_text(const ExchangedReports& exchanged, std::int64_t mine) {
  const auto& reports = exchanged.reports;
  if (reports.empty()) return "";
  int lagging = -1;
  for (int r = 0; r < static_cast<int>(reports.size()); ++r) {
    const std::int64_t issued = reports[static_cast<size_t>(r)].collectives;
    if (r == exchanged.self || issued >= mine) continue;
    if (lagging < 0 || issued < reports[static_cast<size_t>(lagging)].collectives) lagging = r;
  }
  const std::string stalled =
      exchanged.stalled ? fmt::format("; the exchanges of reports stopped {:.1f} s ago (is a rank dead or frozen?)",
                                      exchanged.age_s)
                        : "";
  if (lagging < 0) {
    return fmt::format("{}; at the last exchange of reports, {:.1f} s ago, no rank had issued fewer collectives "
                       "than this one has now ({}): a rank is stuck inside the collective, or the network is",
                       stalled, exchanged.age_s, mine);
  }
  return fmt::format("{}; rank {} ({}) was furthest behind at the last exchange of reports, {:.1f} s ago: {} "
                     "(this rank now: {})",
                     stalled, lagging, exchanged.hosts.at(static_cast<size_t>(lagging)), exchanged.age_s,
                     describe(reports[static_cast<size_t>(lagging)]), mine);
}

}  // namespace hpctrain::comm
