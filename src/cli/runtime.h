// Start-up shared by the commands that run as MPI ranks (train, eval): MPI, rank-aware logging,
// and the banner rank 0 prints. Private to src/cli.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/comm/bootstrap.h"
#include "hpctrain/config/config.h"
#include "hpctrain/config/parser.h"

namespace hpctrain::cli {

// Console logging before MPI starts: rank from the launcher's environment, so only rank 0 talks.
void init_early_logging(const config::LogConfig& log_config);

// Starts MPI, waits until every rank has joined, and re-initializes logging with the rank's
// identity. Collective. A rank that has not seen every rank join within `join_timeout_s` exits
// with code 5 (Note [Join watchdog]); a world that is not the launcher's is a ConfigError, and so
// is, for a command meant to span the job (`whole_allocation`), one process in a Slurm job of
// several tasks.
std::unique_ptr<comm::Bootstrap> start_mpi(const config::LogConfig& log_config, double join_timeout_s,
                                           bool whole_allocation = false);

// dist.timeout_s's default, for commands that take no config (bench).
double default_timeout_s();

// Rank 0: versions, world/local sizes, nodes and hosts, threads. Every rank: its binding, in its log.
void log_banner(const comm::Bootstrap& bootstrap, int threads);

// True when `args` asks for help (-h or --help anywhere).
bool wants_help(const std::vector<std::string>& args);

// The integer >= 0 given as --`name`, or `fallback` (as text) when absent. Throws ConfigError
// naming `command` and the flag.
std::int64_t int_flag(const config::ParsedArgs& parsed, const std::string& command,
                      const std::string& name, const std::string& fallback);

}  // namespace hpctrain::cli
