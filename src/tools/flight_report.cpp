#include "flight_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "hpctrain/comm/flight_analysis.h"
#include "hpctrain/core/error.h"

namespace hpctrain::cli {

void report_flight(const std::string& run_dir, std::ostream& out) {
  const std::string dir = run_dir + "/flight";
  const std::vector<comm::flight::RankDump> dumps = comm::flight::read_dumps(dir, /*strict=*/true);
  if (dumps.empty()) {
    throw ConfigError("no flight recorder dump in " + dir +
                      " (rank-<r>.json: written when a job ends on a hang or an error, or on SIGUSR2)");
  }
  out << fmt::format("{:<6}{:<20}{:>9}  {:<52}{}\n", "rank", "host", "records", "last collective", "dumped because");
  for (const auto& dump : dumps) {
    std::string last = "none";
    if (!dump.records.empty()) {
      const comm::flight::Record& r = dump.records.back();
      last = fmt::format("#{} {} {} B, {}", r.number, r.op, r.bytes, comm::flight::name(r.state));
    }
    out << fmt::format("{:<6}{:<20}{:>9}  {:<52}{}\n", dump.rank, dump.host, dump.records.size(), last, dump.reason);
  }
  const int world = dumps.back().rank + 1;
  const std::string where = comm::flight::first_disagreement(dumps, world);
  out << (where.empty() ? std::string("the ranks' collectives agree: none is missing, different or unfinished")
                        : where)
      << "\n";
}

}  // namespace hpctrain::cli
