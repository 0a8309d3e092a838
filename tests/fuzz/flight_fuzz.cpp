// A flight recorder dump as `hpctrain doctor --flight` reads it (comm/flight_analysis.h): parsed,
// every record checked; when accepted, it must write back to the same records, and the analysis of
// it beside a copy of itself as another rank must run.
#include <filesystem>
#include <stdexcept>
#include <string>

#include "fuzz_target.h"
#include "hpctrain/comm/flight_analysis.h"
#include "hpctrain/core/error.h"

namespace hpctrain::fuzz {

void write_seeds(const std::string& dir) {
  std::filesystem::create_directories(dir);
  comm::flight::RankDump dump;
  dump.rank = 1;
  dump.host = "node1";
  dump.reason = "collective #3 timed out";
  dump.capacity = 2000;
  for (std::int64_t n = 1; n <= 3; ++n) {
    comm::flight::Record r;
    r.number = n;
    r.op = n == 1 ? "barrier (control)" : "allreduce";
    r.bytes = 4096 * n;
    r.dtype = "Float";
    r.bucket = n - 2;
    r.issued_us = 1.8e15 + static_cast<double>(n);
    r.started_us = r.issued_us + 1;
    r.ended_us = n == 3 ? -1 : r.issued_us + 2;
    r.state = n == 3 ? comm::flight::State::kStarted : comm::flight::State::kCompleted;
    dump.records.push_back(r);
  }
  write_file(dir + "/three-records.json", comm::flight::dump_text(dump));
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const bool quiet = (fuzz::silence_logs(), true);
  (void)quiet;
  try {
    const comm::flight::RankDump dump =
        comm::flight::parse_dump(std::string(reinterpret_cast<const char*>(data), size), "rank-0.json");
    const comm::flight::RankDump back = comm::flight::parse_dump(comm::flight::dump_text(dump), "written");
    if (back.records.size() != dump.records.size()) throw std::logic_error("a dump does not write back whole");
    comm::flight::RankDump other = dump;
    other.rank = dump.rank + 1;
    comm::flight::first_disagreement({dump, other}, other.rank + 1);
    fuzz::record(fuzz::Outcome::kAccepted);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kUsage) throw;
    fuzz::record(fuzz::Outcome::kRefused);
  }
  return 0;
}
