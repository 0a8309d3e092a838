// `hpctrain doctor --flight RUN_DIR`: the flight recorder's dumps of a run summarised (comm/
// flight_recorder.h). Private to src/tools.
#pragma once

#include <ostream>
#include <string>

namespace hpctrain::cli {

// Prints each rank's dump (host, why it was written, its last collectives) and where the ranks
// first disagree. Throws ConfigError when there is no dump or a file is not one.
void report_flight(const std::string& run_dir, std::ostream& out);

}  // namespace hpctrain::cli
