// The flight recorder's dumps read back (comm/flight_recorder.h) and where the ranks first
// disagree: the first collective number some rank never issued, or whose operation, size or dtype
// differs between ranks. For the message that ends a job and for `hpctrain doctor --flight`.
// Depends on core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/comm/flight_recorder.h"

namespace hpctrain::comm::flight {

struct RankDump {
  int rank = 0;
  std::string host;
  std::string reason;
  std::int64_t capacity = 0;
  std::vector<Record> records;  // oldest first
};

// One dump's text; `source` names it in errors. Throws ConfigError (exit 2) when it is not one.
RankDump parse_dump(const std::string& text, const std::string& source);
// The dumps in `dir` (rank-<r>.json), by rank; files that are not dumps are skipped with a warning
// unless `strict` (then ConfigError). Each file's size is checked before it is read.
std::vector<RankDump> read_dumps(const std::string& dir, bool strict);

// "collective #57 (allreduce of 5,672 bytes float32, bucket 0): rank 1 never issued it (its last:
// #56, allreduce of ..., completed), ranks 0 did" or "collective #57 differs: rank 0 allreduce of
// 5,672 bytes float32 (bucket 0), rank 1 allreduce of 5,668 bytes float32 (bucket 0)" or
// "rank 1 skipped collective #57 (...): its #57 is the others' #58"; "" when the dumps agree
// everywhere they overlap. `world_size` ranks were expected; missing dumps are named.
std::string first_disagreement(const std::vector<RankDump>& dumps, int world_size);

// The dump's JSON text (what dump() writes).
std::string dump_text(const RankDump& dump);

}  // namespace hpctrain::comm::flight
