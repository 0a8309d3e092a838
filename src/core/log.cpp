#include "hpctrain/core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <filesystem>
#include <memory>

#include "hpctrain/core/error.h"

namespace hpctrain::log {
namespace {

Identity g_who;

// Console output: rank 0 shows INFO and up; other ranks show WARN and up unless all_ranks.
// Non-zero ranks (and every WARN/ERROR) carry the "[rank/size host]" prefix.
std::shared_ptr<spdlog::sinks::sink> make_console_sink(bool all_ranks) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  const bool quiet_rank = g_who.world_rank != 0 && !all_ranks;
  sink->set_level(quiet_rank ? spdlog::level::warn : spdlog::level::trace);
  const std::string prefix = g_who.world_size > 1 ? "[" + std::to_string(g_who.world_rank) + "/" +
                                                        std::to_string(g_who.world_size) + " " +
                                                        g_who.host + "] "
                                                  : "";
  sink->set_pattern(g_who.world_rank == 0 && !all_ranks ? "%^%v%$" : prefix + "%v");
  return sink;
}

}  // namespace

void init_console(const Identity& who, bool all_ranks, spdlog::level::level_enum level) {
  g_who = who;
  auto logger = std::make_shared<spdlog::logger>("hpctrain", make_console_sink(all_ranks));
  logger->set_level(level);
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

void add_file(const std::string& path) {
  try {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
    sink->set_pattern("%Y-%m-%dT%H:%M:%S.%e %l " + where() + " %v");
    spdlog::default_logger()->sinks().push_back(sink);
  } catch (const std::exception& e) {
    throw Error("cannot open log file " + path + ": " + e.what() + " (check run.dir)",
                ExitCode::kUsage);
  }
}

void shutdown() { spdlog::default_logger()->flush(); }

std::string where() {
  return "[" + std::to_string(g_who.world_rank) + "/" + std::to_string(g_who.world_size) + " " +
         g_who.host + "]";
}

spdlog::level::level_enum parse_level(const std::string& name) {
  const auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") {
    throw ConfigError("unknown log level '" + name + "'");
  }
  return level;
}

}  // namespace hpctrain::log
