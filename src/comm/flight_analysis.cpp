// The flight recorder's dumps: their JSON both ways, and the first collective where ranks part.
#include "hpctrain/comm/flight_analysis.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"

namespace hpctrain::comm::flight {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr std::int64_t kMaxDumpBytes = std::int64_t{1} << 28;  // 2,000 records are about 0.5 MB

[[noreturn]] void refuse(const std::string& source, const std::string& what) {
  throw ConfigError(source + ": " + what + "; a flight dump is a flight/rank-<r>.json that hpctrain wrote");
}

const json& field(const json& object, const char* key, const std::string& source) {
  const auto found = object.find(key);
  if (found == object.end()) refuse(source, std::string("'") + key + "' is missing");
  return *found;
}

std::int64_t integer(const json& object, const char* key, const std::string& source) {
  const json& value = field(object, key, source);
  if (!value.is_number_integer() ||
      (value.is_number_unsigned() && value.get<std::uint64_t>() > std::uint64_t{1} << 62)) {
    refuse(source, std::string("'") + key + "' is not an integer in range");
  }
  return value.get<std::int64_t>();
}

double number(const json& object, const char* key, const std::string& source) {
  const json& value = field(object, key, source);
  if (!value.is_number()) refuse(source, std::string("'") + key + "' is not a number");
  return value.get<double>();
}

std::string text(const json& object, const char* key, const std::string& source) {
  const json& value = field(object, key, source);
  if (!value.is_string()) refuse(source, std::string("'") + key + "' is not a string");
  return value.get<std::string>();
}

State state_named(const std::string& name, const std::string& source) {
  for (const State s : {State::kIssued, State::kStarted, State::kCompleted, State::kFailed}) {
    if (name == flight::name(s)) return s;
  }
  refuse(source, "'" + name + "' is not a collective's state");
}

std::string describe(const Record& r) {
  return fmt::format("{} of {} bytes {}{}", r.op, r.bytes, r.dtype,
                     r.bucket >= 0 ? fmt::format(", bucket {}", r.bucket) : std::string());
}

// "rank 3", "ranks 0,2", "ranks 0,1,2,3,4,5,6,7 and 120 more".
std::string rank_list(const std::vector<int>& ranks) {
  constexpr size_t kShown = 8;
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) out += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > kShown) out += fmt::format(" and {} more", ranks.size() - kShown);
  return out;
}

bool same_call(const Record& a, const Record& b) { return a.op == b.op && a.bytes == b.bytes && a.dtype == b.dtype; }

struct RankView {
  int rank = 0;
  std::map<std::int64_t, const Record*> by_number;
  std::int64_t oldest() const { return by_number.empty() ? 0 : by_number.begin()->first; }
  std::int64_t newest() const { return by_number.empty() ? 0 : by_number.rbegin()->first; }
  const Record* at(std::int64_t n) const {
    const auto found = by_number.find(n);
    return found == by_number.end() ? nullptr : found->second;
  }
};

// Collective n, which some ranks issued and others never did.
std::string never_issued(std::int64_t n, const std::vector<const RankView*>& with,
                         const std::vector<const RankView*>& without) {
  std::vector<int> did;
  std::vector<int> did_not;
  for (const RankView* v : with) did.push_back(v->rank);
  for (const RankView* v : without) did_not.push_back(v->rank);
  const RankView& first_without = *without.front();
  const Record* last = first_without.at(first_without.newest());
  return fmt::format("collective #{} ({}): {} never issued it ({}'s last: {}), {} did", n, describe(*with.front()->at(n)),
                     rank_list(did_not), rank_list({first_without.rank}),
                     last ? fmt::format("#{}, {}, {}", last->number, describe(*last), name(last->state)) : "none",
                     rank_list(did));
}

// Collective n, issued by every rank in `views` but not alike.
std::string differs(std::int64_t n, const std::vector<const RankView*>& views) {
  // A rank whose n is the others' n + 1 skipped n.
  for (const RankView* v : views) {
    const Record& mine = *v->at(n);
    bool skipped = true;
    for (const RankView* other : views) {
      if (other == v) continue;
      const Record* next = other->at(n + 1);
      skipped = skipped && !same_call(mine, *other->at(n)) && next != nullptr && same_call(mine, *next);
    }
    if (skipped) {
      const RankView* other = views.front() == v ? views.back() : views.front();
      return fmt::format("{} skipped collective #{} ({}): its #{} ({}) is the others' #{}", rank_list({v->rank}), n,
                         describe(*other->at(n)), n, describe(mine), n + 1);
    }
  }
  std::vector<std::pair<const Record*, std::vector<int>>> groups;
  for (const RankView* v : views) {
    const Record& r = *v->at(n);
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return same_call(*g.first, r); });
    if (group == groups.end()) {
      groups.push_back({&r, {v->rank}});
    } else {
      group->second.push_back(v->rank);
    }
  }
  std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::string out = fmt::format("collective #{} differs between ranks (a desync):", n);
  for (size_t i = 0; i < groups.size(); ++i) {
    out += fmt::format("{} {} issued {}", i ? ";" : "", rank_list(groups[i].second), describe(*groups[i].first));
  }
  return out;
}

// When every rank issued the same calls: the first one not complete on some rank.
std::string first_unfinished(const std::set<std::int64_t>& numbers, const std::vector<RankView>& views) {
  for (const std::int64_t n : numbers) {
    std::vector<int> open;
    const Record* first_open = nullptr;
    for (const RankView& v : views) {
      const Record* r = v.at(n);
      if (r == nullptr || r->state == State::kCompleted) continue;
      open.push_back(v.rank);
      if (first_open == nullptr) first_open = r;
    }
    if (first_open != nullptr) {
      return fmt::format("every rank issued collective #{} ({}) alike; it is not complete on {} ({})", n,
                         describe(*first_open), rank_list(open), name(first_open->state));
    }
  }
  return "";
}

}  // namespace

std::string dump_text(const RankDump& dump) {
  json records = json::array();
  for (const Record& r : dump.records) {
    records.push_back({{"number", r.number}, {"op", r.op}, {"bytes", r.bytes}, {"dtype", r.dtype},
                       {"bucket", r.bucket}, {"issued_us", r.issued_us}, {"started_us", r.started_us},
                       {"ended_us", r.ended_us}, {"state", name(r.state)}});
  }
  const json doc = {{"rank", dump.rank}, {"host", dump.host}, {"reason", dump.reason},
                    {"capacity", dump.capacity}, {"records", records}};
  return doc.dump(1) + "\n";
}

RankDump parse_dump(const std::string& content, const std::string& source) {
  const json doc = json::parse(content, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) refuse(source, "not JSON");
  if (!doc.is_object()) refuse(source, "not a JSON object");
  RankDump dump;
  const std::int64_t rank = integer(doc, "rank", source);
  if (rank < 0 || rank > (1 << 24)) refuse(source, "'rank' is out of range");
  dump.rank = static_cast<int>(rank);
  dump.host = text(doc, "host", source);
  dump.reason = text(doc, "reason", source);
  dump.capacity = integer(doc, "capacity", source);
  const json& records = field(doc, "records", source);
  if (!records.is_array()) refuse(source, "'records' is not an array");
  for (const json& r : records) {
    if (!r.is_object()) refuse(source, "a record is not an object");
    Record record;
    record.number = integer(r, "number", source);
    if (record.number < 1) refuse(source, "a record's number is below 1");
    if (!dump.records.empty() && record.number <= dump.records.back().number) {
      refuse(source, "the records are not in increasing number");
    }
    record.op = text(r, "op", source);
    record.bytes = integer(r, "bytes", source);
    record.dtype = text(r, "dtype", source);
    record.bucket = integer(r, "bucket", source);
    record.issued_us = number(r, "issued_us", source);
    record.started_us = number(r, "started_us", source);
    record.ended_us = number(r, "ended_us", source);
    record.state = state_named(text(r, "state", source), source);
    dump.records.push_back(std::move(record));
  }
  return dump;
}

std::vector<RankDump> read_dumps(const std::string& dir, bool strict) {
  std::vector<RankDump> dumps;
  std::error_code ec;
  const std::regex rank_file(R"(rank-[0-9]+\.json)");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string file = entry.path().string();
    if (!std::regex_match(entry.path().filename().string(), rank_file)) continue;
    try {
      const auto size = fs::file_size(entry.path(), ec);
      if (ec) throw ConfigError("cannot read " + file + ": " + ec.message());
      if (static_cast<std::int64_t>(size) > kMaxDumpBytes) {
        throw ConfigError(file + " is " + std::to_string(size) + " bytes, more than a flight dump can be");
      }
      std::ifstream in(file, std::ios::binary);
      std::string content(static_cast<size_t>(size), '\0');
      if (!in.read(content.data(), static_cast<std::streamsize>(size))) throw ConfigError("cannot read " + file);
      dumps.push_back(parse_dump(content, file));
    } catch (const ConfigError& error) {
      if (strict) throw;
      log::warn("flight recorder: skipping {}", error.what());
    }
  }
  std::sort(dumps.begin(), dumps.end(), [](const RankDump& a, const RankDump& b) { return a.rank < b.rank; });
  return dumps;
}

std::string first_disagreement(const std::vector<RankDump>& dumps, int world_size) {
  std::map<int, const RankDump*> by_rank;
  for (const RankDump& d : dumps) by_rank.emplace(d.rank, &d);
  std::vector<RankView> views;
  for (const auto& [rank, dump] : by_rank) {
    if (rank >= world_size) continue;
    RankView view;
    view.rank = rank;
    for (const Record& r : dump->records) view.by_number[r.number] = &r;
    views.push_back(std::move(view));
  }
  const std::int64_t missing_count = world_size - static_cast<std::int64_t>(views.size());
  std::vector<int> missing;  // the first few
  for (int rank = 0; rank < world_size && missing.size() < 8; ++rank) {
    if (by_rank.count(rank) == 0) missing.push_back(rank);
  }
  const auto more = missing_count - static_cast<std::int64_t>(missing.size());
  const std::string no_dump =
      missing.empty() ? ""
                      : fmt::format("; no dump from {}{} (dead, frozen, or too slow to write)", rank_list(missing),
                                    more > 0 ? fmt::format(" and {} more", more) : "");
  if (views.empty()) return "no rank wrote a dump" + no_dump;
  // Every rank still holds the collectives from the newest of their oldest on.
  std::int64_t lo = 0;
  for (const RankView& v : views) lo = std::max(lo, v.oldest());
  std::set<std::int64_t> numbers;
  for (const RankView& v : views) {
    for (auto it = v.by_number.lower_bound(lo); it != v.by_number.end(); ++it) numbers.insert(it->first);
  }
  for (const std::int64_t n : numbers) {
    std::vector<const RankView*> with;
    std::vector<const RankView*> without;
    for (const RankView& v : views) {
      if (v.at(n)) {
        with.push_back(&v);
      } else if (v.newest() < n) {
        without.push_back(&v);
      }
    }
    if (!without.empty()) return never_issued(n, with, without) + no_dump;
    if (with.size() < views.size()) continue;  // a gap in some rank's numbers: not comparable
    const bool alike = std::all_of(with.begin(), with.end(),
                                   [&](const RankView* v) { return same_call(*v->at(n), *with.front()->at(n)); });
    if (!alike) return differs(n, with) + no_dump;
  }
  std::string result = first_unfinished(numbers, views);
  if (!no_dump.empty()) result += result.empty() ? no_dump.substr(2) : no_dump;
  return result;
}

}  // namespace hpctrain::comm::flight
