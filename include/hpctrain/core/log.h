// Rank-aware logging on top of spdlog. INFO goes to the console on rank 0 only (unless all_ranks);
// WARN and ERROR go to the console on every rank, prefixed "[rank/size host]". Every rank also writes
// everything to its own log file once the run directory exists. Depends on core and spdlog/fmt only.
#pragma once

#include <spdlog/spdlog.h>

#include <string>

namespace hpctrain::log {

struct Identity {
  int world_rank = 0;
  int world_size = 1;
  std::string host;
};

// Sets up the console logger. Safe to call again (e.g. once the rank is known).
void init_console(const Identity& who, bool all_ranks, spdlog::level::level_enum level);

// Adds a per-rank file sink (created with its parent directory). Throws hpctrain::Error on failure.
void add_file(const std::string& path);

// Flushes and closes sinks; called before exit.
void shutdown();

// "[rank/size host]" for messages that must say where they come from.
std::string where();

spdlog::level::level_enum parse_level(const std::string& name);

template <typename... Args>
void info(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::info(f, std::forward<Args>(args)...);
}
template <typename... Args>
void warn(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::warn(f, std::forward<Args>(args)...);
}
template <typename... Args>
void error(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::error(f, std::forward<Args>(args)...);
}
template <typename... Args>
void debug(fmt::format_string<Args...> f, Args&&... args) {
  spdlog::debug(f, std::forward<Args>(args)...);
}

}  // namespace hpctrain::log
