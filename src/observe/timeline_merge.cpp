// TimelineMerger: each rank's file is parsed, checked field by field, and its events appended.
#include "hpctrain/observe/timeline_merge.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <vector>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::observe {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxRank = 1 << 24;

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw ConfigError(source + ": " + what + "; a timeline is a trace/rank-<r>.json that log.trace_steps wrote");
}

std::int64_t integer(const json& object, const char* key, const std::string& source) {
  const auto found = object.find(key);
  if (found == object.end() || !found->is_number_integer()) {
    refuse(source, std::string("'") + key + "' is missing or not an integer");
  }
  if (found->is_number_unsigned() &&
      found->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    refuse(source, std::string("'") + key + "' is out of range");
  }
  return found->get<std::int64_t>();
}

const json& member(const json& object, const char* key, bool (json::*is)() const noexcept, const char* kind,
                   const std::string& source) {
  const auto found = object.find(key);
  if (found == object.end() || !((*found).*is)()) {
    refuse(source, std::string("'") + key + "' is missing or not " + kind);
  }
  return *found;
}

void check_event(const json& event, std::int64_t rank, const std::string& source) {
  if (!event.is_object()) refuse(source, "an entry of 'traceEvents' is not an object");
  const std::string& phase = member(event, "ph", &json::is_string, "a string", source).get_ref<const std::string&>();
  if (integer(event, "pid", source) != rank) refuse(source, "an event's pid is not the file's rank");
  integer(event, "tid", source);
  member(event, "name", &json::is_string, "a string", source);
  if (phase == "X") {
    member(event, "ts", &json::is_number, "a number", source);
    if (member(event, "dur", &json::is_number, "a number", source).get<double>() < 0) {
      refuse(source, "a span has a negative duration");
    }
  } else if (phase != "M") {
    refuse(source, "an event's phase '" + phase + "' is neither X nor M");
  }
}

}  // namespace

struct TimelineMerger::Events {
  json list = json::array();
};

TimelineMerger::TimelineMerger() : events_(std::make_unique<Events>()) {}
TimelineMerger::~TimelineMerger() = default;

TimelineFacts TimelineMerger::add(const std::string& text, const std::string& source) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) refuse(source, "not JSON");
  if (!doc.is_object()) refuse(source, "not a JSON object");
  const json& other = member(doc, "otherData", &json::is_object, "an object", source);
  TimelineFacts facts;
  const std::int64_t rank = integer(other, "rank", source);
  if (rank < 0 || rank > kMaxRank) refuse(source, "'rank' " + std::to_string(rank) + " is out of range");
  facts.rank = static_cast<int>(rank);
  facts.host = member(other, "host", &json::is_string, "a string", source).get<std::string>();
  facts.first_step = integer(other, "first_step", source);
  facts.last_step = integer(other, "last_step", source);
  if (ranks_.count(facts.rank) != 0) refuse(source, "rank " + std::to_string(rank) + " is in two files");
  const json& events = member(doc, "traceEvents", &json::is_array, "an array", source);
  for (const json& event : events) {
    check_event(event, rank, source);
    if (event["ph"] == "X") ++facts.spans;
  }
  for (const json& event : events) events_->list.push_back(event);
  ranks_.emplace(facts.rank, facts);
  return facts;
}

std::string TimelineMerger::merged_text() const {
  json ranks = json::array();
  for (const auto& [rank, facts] : ranks_) {
    ranks.push_back({{"rank", rank}, {"host", facts.host}, {"first_step", facts.first_step},
                     {"last_step", facts.last_step}});
  }
  const json merged = {
      {"traceEvents", events_->list}, {"displayTimeUnit", "ms"}, {"otherData", {{"ranks", ranks}}}};
  return merged.dump() + "\n";
}

MergedTimelines merge_timelines(const std::string& run_dir, std::int64_t max_bytes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(run_dir) / "trace";
  std::error_code ec;
  std::vector<fs::path> files;
  const std::regex rank_file(R"(rank-[0-9]+\.json)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (std::regex_match(entry.path().filename().string(), rank_file)) files.push_back(entry.path());
  }
  if (ec || files.empty()) {
    throw ConfigError("no timeline in " + dir.string() + " (rank-<r>.json): train with --log.trace_steps=A-B first");
  }
  std::sort(files.begin(), files.end());
  TimelineMerger merger;
  for (const fs::path& file : files) {
    const auto size = fs::file_size(file, ec);
    if (ec) throw ConfigError("cannot read " + file.string() + ": " + ec.message());
    if (static_cast<std::int64_t>(size) > max_bytes) {
      throw ConfigError(file.string() + " is " + std::to_string(size) + " bytes, more than the " +
                        std::to_string(max_bytes) + " merge reads; trace fewer steps");
    }
    std::ifstream in(file, std::ios::binary);
    std::string text(static_cast<size_t>(size), '\0');
    if (!in.read(text.data(), static_cast<std::streamsize>(size))) {
      throw ConfigError("cannot read " + file.string());
    }
    merger.add(text, file.string());
  }
  const std::string target = (dir / "all-ranks.json").string();
  const std::string temp = target + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << merger.merged_text();
    if (!out.flush()) throw ConfigError("cannot write " + temp);
  }
  sys::publish_atomically(temp, target);
  return {target, merger.ranks()};
}

}  // namespace hpctrain::observe
