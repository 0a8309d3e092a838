#include "hpctrain/core/log.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <filesystem>
#include <memory>

#include "hpctrain/core/error.h"

namespace hpctrain::log {
namespace {

Identity g_who;

std::string prefix() {
  return "[" + std::to_string(g_who.world_rank) + "/" + std::to_string(g_who.world_size) + " " +
         g_who.host + "] ";
}

// "%*" in a pattern: the "[rank/size host] " prefix, on WARN and above always, on every line when
// `always` (other ranks' INFO with all_ranks), and never in a single-process run.
class WhereFlag final : public spdlog::custom_flag_formatter {
 public:
  explicit WhereFlag(bool always) : always_(always) {}
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (g_who.world_size <= 1 || (!always_ && msg.level < spdlog::level::warn)) return;
    const std::string text = prefix();
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<WhereFlag>(always_);
  }

 private:
  bool always_;
};

// Console output: rank 0 shows INFO and up; other ranks show WARN and up unless all_ranks.
std::shared_ptr<spdlog::sinks::sink> make_console_sink(bool all_ranks) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  const bool quiet_rank = g_who.world_rank != 0 && !all_ranks;
  sink->set_level(quiet_rank ? spdlog::level::warn : spdlog::level::trace);
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<WhereFlag>('*', all_ranks).set_pattern("%*%v");
  sink->set_formatter(std::move(formatter));
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
  std::string text = prefix();
  text.pop_back();  // no trailing space
  return text;
}

spdlog::level::level_enum parse_level(const std::string& name) {
  const auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off") {
    throw ConfigError("unknown log level '" + name + "'");
  }
  return level;
}

}  // namespace hpctrain::log
