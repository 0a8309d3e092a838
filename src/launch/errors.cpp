#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/comm/flight_recorder.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/launch/commands.h"
#include "hpctrain/runtime/run_lock.h"

namespace hpctrain::cli {

void exit_with_error(const std::string& what, int exit_code) {
  runtime::RunLock::release_held();  // destructors do not run on this way out
  const int world = comm::Bootstrap::running_world_size();
  // Note [Flight recorder]: for a failed collective or an internal error, where the ranks'
  // collectives parted, when the recorder runs; a config, data or checkpoint error is not about them.
  const bool collectives_matter = exit_code == static_cast<int>(ExitCode::kComm) ||
                                  exit_code == static_cast<int>(ExitCode::kInternal);
  const std::string flight =
      world > 0 && collectives_matter ? comm::flight::dump_everywhere_and_analyse(what, world) : "";
  const std::string message = flight.empty() ? what : what + "; " + flight;
  if (world > 1) {
    // An error every rank meets (a bad checkpoint, a config that does not fit the world) would
    // print once per rank: the others give rank 0 a moment, whose abort then ends them first. An
    // error of one rank alone is still printed, a moment later.
    if (comm::Bootstrap::launcher_rank() != 0) std::this_thread::sleep_for(std::chrono::seconds(2));
    std::fprintf(stderr, "hpctrain: error: %s %s\n", log::where().c_str(), message.c_str());
    std::fflush(stderr);
    log::shutdown();
    comm::Bootstrap::abort_job(exit_code);
  }
  if (comm::Bootstrap::launcher_rank() == 0) {
    std::fprintf(stderr, "hpctrain: error: %s\n", message.c_str());
  } else {
    // Before MPI starts every rank meets the same error and only rank 0 reports it; a rank that
    // exits first makes the launcher kill the rest, so on a loaded machine rank 0 could be killed
    // before its line is out. The others give it a moment.
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  log::shutdown();
  comm::Bootstrap::finalize_if_running();
  // _Exit, not exit: HDF5's exit handler would close files that the error left half-written (a
  // checkpoint on a full disk) and can crash doing so, turning a clean exit code into a signal.
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

}  // namespace hpctrain::cli
