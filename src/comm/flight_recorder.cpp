// The flight recorder (Note [Flight recorder] in the header): a ring under one mutex, dumps written
// atomically, a request file that the other ranks' watch threads answer.
#include "hpctrain/comm/flight_recorder.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "hpctrain/comm/flight_analysis.h"
#include "hpctrain/core/activity.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"
#include "hpctrain/core/trace.h"
#include "rank_report.h"

namespace hpctrain::comm::flight {
namespace {

namespace fs = std::filesystem;

struct Ring {
  std::mutex mutex;
  std::mutex writing;         // one dump at a time: the watch's and an error's may coincide
  std::vector<Record> slots;  // collective n in slot n % size
  std::string dir;            // "": dumps go nowhere
  int rank = 0;
  double answer_wait_s = 1;     // for the others' dumps
  std::string request_handled;  // the request file's text last answered
};

Ring& ring() {
  static Ring instance;
  return instance;
}

std::atomic<bool> g_usr2{false};
extern "C" void on_usr2(int) { g_usr2.store(true); }

std::string dump_path(const Ring& r) { return r.dir + "/rank-" + std::to_string(r.rank) + ".json"; }
std::string request_path(const std::string& dir) { return dir + "/dump-requested"; }

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  std::getline(in, text);
  return text;
}

// Under the ring's mutex: the record of collective `number`, if the ring still holds it.
Record* slot_of(Ring& r, std::int64_t number) {
  if (r.slots.empty()) return nullptr;
  Record& record = r.slots[static_cast<size_t>(number) % r.slots.size()];
  return record.number == number ? &record : nullptr;
}

// `temp_tag` keeps ranks that write the same file (the request) off each other's temporary file.
void write_atomically(const std::string& path, const std::string& text, const std::string& temp_tag) {
  const std::string temp = path + "." + temp_tag + ".tmp";
  {
    std::ofstream out(temp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out.flush()) throw Error("cannot write " + temp);
  }
  sys::publish_atomically(temp, path);
}

}  // namespace

const char* name(State state) {
  switch (state) {
    case State::kIssued: return "issued";
    case State::kStarted: return "started";
    case State::kCompleted: return "completed";
    case State::kFailed: return "failed";
  }
  return "unknown";
}

void configure(std::int64_t capacity, const std::string& dir, int rank, double timeout_s) {
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.answer_wait_s = 2 * beat_period_s(timeout_s) + 1;
  r.slots.assign(static_cast<size_t>(std::max<std::int64_t>(capacity, 0)), Record{});
  r.dir = capacity > 0 ? dir : "";
  r.rank = rank;
  if (r.dir.empty()) return;
  std::error_code ec;
  fs::create_directories(r.dir, ec);
  fs::remove(dump_path(r), ec);  // an earlier run's
  r.request_handled = read_small_file(request_path(r.dir));
}

std::int64_t issue(const char* op, std::int64_t bytes, const char* dtype) {
  const std::int64_t number = activity::count_collective();
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (r.slots.empty()) return number;
  Record& record = r.slots[static_cast<size_t>(number) % r.slots.size()];
  record = Record{number, op, bytes, dtype, trace::BucketScope::current(), trace::now_us(), -1, -1, State::kIssued};
  return number;
}

void start(std::int64_t number) {
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (Record* record = slot_of(r, number)) {
    record->started_us = trace::now_us();
    record->state = State::kStarted;
  }
}

void end(std::int64_t number, bool ok) {
  Ring& r = ring();
  const std::lock_guard<std::mutex> lock(r.mutex);
  if (Record* record = slot_of(r, number)) {
    record->ended_us = trace::now_us();
    record->state = ok ? State::kCompleted : State::kFailed;
  }
}

Blocking::Blocking(const char* op, std::int64_t bytes, const char* dtype)
    : number_(issue(op, bytes, dtype)), exceptions_(std::uncaught_exceptions()) {
  start(number_);
}

Blocking::~Blocking() { end(number_, std::uncaught_exceptions() == exceptions_); }

std::string dump(const std::string& reason) {
  Ring& r = ring();
  RankDump mine;
  std::string path;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    if (r.dir.empty()) return "";
    mine.rank = r.rank;
    mine.capacity = static_cast<std::int64_t>(r.slots.size());
    for (const Record& record : r.slots) {
      if (record.number > 0) mine.records.push_back(record);
    }
    path = dump_path(r);
  }
  std::sort(mine.records.begin(), mine.records.end(),
            [](const Record& a, const Record& b) { return a.number < b.number; });
  mine.host = sys::host_name();
  mine.reason = reason;
  try {
    const std::lock_guard<std::mutex> writing(r.writing);
    write_atomically(path, dump_text(mine), "dump");
  } catch (const std::exception& error) {
    log::warn("flight recorder: {}", error.what());
    return "";
  }
  return path;
}

void dump_if_asked() {
  if (g_usr2.exchange(false)) {
    const std::string path = dump("SIGUSR2");
    if (!path.empty()) log::warn("flight recorder: SIGUSR2: the last collectives of this rank are in {}", path);
  }
  Ring& r = ring();
  std::string dir;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    dir = r.dir;
  }
  if (dir.empty()) return;
  std::error_code ec;
  if (!fs::exists(request_path(dir), ec)) return;
  const std::string request = read_small_file(request_path(dir));
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    if (request.empty() || request == r.request_handled) return;
    r.request_handled = request;
  }
  dump("asked by " + request);
}

std::string dump_everywhere_and_analyse(const std::string& reason, int world_size) {
  Ring& r = ring();
  std::string dir;
  int rank = 0;
  double wait_s = 0;
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    dir = r.dir;
    rank = r.rank;
    wait_s = r.answer_wait_s;
  }
  if (dir.empty() || dump(reason).empty()) return "";
  // The others answer "asked by <this text>": a token of this request, so older dumps are not
  // counted; this rank's own watch leaves it.
  const std::string request = fmt::format("rank {} at {:.0f}", rank, trace::now_us());
  {
    const std::lock_guard<std::mutex> lock(r.mutex);
    r.request_handled = request;
  }
  try {
    write_atomically(request_path(dir), request + "\n", "rank-" + std::to_string(rank));
  } catch (const std::exception& error) {
    log::warn("flight recorder: {}", error.what());
  }
  const auto answered = [&](const std::vector<RankDump>& dumps) {
    int count = 0;
    for (const RankDump& d : dumps) count += d.rank == rank || d.reason == "asked by " + request ? 1 : 0;
    return count;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  std::vector<RankDump> dumps = read_dumps(dir, /*strict=*/false);
  while (answered(dumps) < world_size && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    dumps = read_dumps(dir, /*strict=*/false);
  }
  const std::string where = first_disagreement(dumps, world_size);
  return "flight recorder: " + (where.empty() ? "every rank's last collectives agree" : where) + " (dumps in " +
         dir + "; hpctrain doctor --flight RUN_DIR)";
}

void handle_usr2(bool usr2_is_taken) {
  if (usr2_is_taken) {
    log::info("flight recorder: SIGUSR2 stops the run (ckpt.signals), so it does not dump the records");
    return;
  }
  struct sigaction action {};
  action.sa_handler = on_usr2;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR2, &action, nullptr);
}

}  // namespace hpctrain::comm::flight
