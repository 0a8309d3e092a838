// The timeline of log.trace_steps: spans gathered in memory under one mutex, written once as a
// Chrome trace-event file (the "X" complete events and "M" metadata of the trace-event format).
#include "hpctrain/core/trace.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hpctrain/core/log.h"
#include "hpctrain/core/system.h"

namespace hpctrain::trace {
namespace {

struct Event {
  const char* name;
  int track;
  double start_us;
  double end_us;
  Arg args[2];
};

struct Timeline {
  std::atomic<bool> on{false};  // read without the mutex by every span
  std::mutex mutex;
  std::uint64_t generation = 0;  // start() count: threads' cached track numbers go stale with it
  bool started = false;
  bool written = false;
  std::string path;
  int rank = 0;
  std::int64_t first = 0;
  std::int64_t last = 0;
  std::int64_t last_begun = 0;
  std::vector<Event> events;
  std::vector<std::string> tracks;  // track number -> name
  std::unordered_map<std::string, int> track_numbers;
};

Timeline& timeline() {
  static Timeline instance;
  return instance;
}

thread_local std::string t_thread_name;
thread_local int t_track = -1;
thread_local std::uint64_t t_track_generation = 0;
thread_local std::int64_t t_bucket = -1;

// Under the timeline's mutex.
int track_named(Timeline& t, const std::string& name) {
  const auto found = t.track_numbers.find(name);
  if (found != t.track_numbers.end()) return found->second;
  const int number = static_cast<int>(t.tracks.size());
  t.tracks.push_back(name);
  t.track_numbers.emplace(name, number);
  return number;
}

int track_of_this_thread(Timeline& t) {
  if (t_track < 0 || t_track_generation != t.generation) {
    if (t_thread_name.empty()) t_thread_name = fmt::format("thread {}", t.tracks.size());
    t_track = track_named(t, t_thread_name);
    t_track_generation = t.generation;
  }
  return t_track;
}

void add_event(Event event, const char* track) {
  Timeline& t = timeline();
  const std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.started || t.written) return;
  event.track = track ? track_named(t, track) : track_of_this_thread(t);
  t.events.push_back(event);
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) out += c;
  }
  return out + "\"";
}

std::string event_json(const Event& e, int pid) {
  std::string args;
  for (const Arg& a : e.args) {
    if (a.key == nullptr) continue;
    args += fmt::format("{}\"{}\":{}", args.empty() ? "" : ",", a.key, a.value);
  }
  return fmt::format(R"({{"ph":"X","pid":{},"tid":{},"name":{},"ts":{:.3f},"dur":{:.3f},"args":{{{}}}}})", pid,
                     e.track, json_string(e.name), e.start_us, e.end_us - e.start_us, args);
}

std::string metadata_json(const char* what, int pid, int tid, const std::string& key, const std::string& value) {
  return fmt::format(R"({{"ph":"M","pid":{},"tid":{},"name":"{}","args":{{"{}":{}}}}})", pid, tid, what, key,
                     value);
}

// Under the timeline's mutex. A failure to write is a warning: the run itself is fine.
void write_locked(Timeline& t) {
  t.written = true;
  t.on.store(false, std::memory_order_relaxed);
  const int pid = t.rank;
  std::string text = "{\"traceEvents\":[\n";
  text += metadata_json("process_name", pid, 0, "name", json_string(fmt::format("rank {}", t.rank)));
  text += ",\n" + metadata_json("process_sort_index", pid, 0, "sort_index", std::to_string(t.rank));
  for (size_t i = 0; i < t.tracks.size(); ++i) {
    const int tid = static_cast<int>(i);
    text += ",\n" + metadata_json("thread_name", pid, tid, "name", json_string(t.tracks[i]));
    text += ",\n" + metadata_json("thread_sort_index", pid, tid, "sort_index", std::to_string(tid));
  }
  for (const Event& e : t.events) text += ",\n" + event_json(e, pid);
  text += fmt::format("\n],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"rank\":{},\"host\":{},"
                      "\"first_step\":{},\"last_step\":{}}}}}\n",
                      t.rank, json_string(sys::host_name()), t.first, std::min(t.last, t.last_begun));
  const std::string temp = t.path + ".tmp";
  std::FILE* out = std::fopen(temp.c_str(), "wb");
  const bool ok = out != nullptr && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  if (out != nullptr && std::fclose(out) != 0) return log::warn("log.trace_steps: cannot write {}", temp);
  if (!ok) return log::warn("log.trace_steps: cannot write {}: the timeline is lost", temp);
  try {
    sys::publish_atomically(temp, t.path);
    log::info("timeline of steps {}-{}: {} spans in {}", t.first, std::min(t.last, t.last_begun), t.events.size(),
              t.path);
  } catch (const std::exception& error) {
    log::warn("log.trace_steps: {}", error.what());
  }
}

}  // namespace

void start(const std::string& path, int rank, std::int64_t first, std::int64_t last) {
  Timeline& t = timeline();
  const std::lock_guard<std::mutex> lock(t.mutex);
  t.started = true;
  t.written = false;
  t.path = path;
  t.rank = rank;
  t.first = first;
  t.last = last;
  t.last_begun = 0;
  t.events.clear();
  t.tracks.clear();
  t.track_numbers.clear();
  ++t.generation;
}

void begin_step(std::int64_t step) {
  Timeline& t = timeline();
  if (!t.started) return;  // without the mutex: start() runs on this thread, before any step
  const std::lock_guard<std::mutex> lock(t.mutex);
  if (t.written) return;
  if (step > t.last) return write_locked(t);
  t.last_begun = step;
  t.on.store(step >= t.first, std::memory_order_relaxed);
}

void finish() {
  Timeline& t = timeline();
  const std::lock_guard<std::mutex> lock(t.mutex);
  if (!t.started || t.written) return;
  if (t.last_begun < t.first) {
    t.written = true;
    return log::warn("log.trace_steps={}-{}: the run ended before step {}; no timeline written", t.first, t.last,
                     t.first);
  }
  write_locked(t);
}

bool recording() { return timeline().on.load(std::memory_order_relaxed); }

void name_thread(const std::string& name) {
  t_thread_name = name;
  t_track = -1;
}

double now_us() {
  using namespace std::chrono;
  static const double wall_base = duration<double, std::micro>(system_clock::now().time_since_epoch()).count();
  static const steady_clock::time_point steady_base = steady_clock::now();
  return wall_base + duration<double, std::micro>(steady_clock::now() - steady_base).count();
}

void add_span(const char* track, const char* name, double start_us, double end_us, std::initializer_list<Arg> args) {
  if (!recording()) return;
  Event event{name, 0, start_us, end_us, {}};
  size_t i = 0;
  for (const Arg& a : args) {
    if (i < 2) event.args[i++] = a;
  }
  add_event(event, track);
}

Span::Span(const char* name, std::initializer_list<Arg> args) noexcept : name_(name) {
  if (!recording()) return;
  size_t i = 0;
  for (const Arg& a : args) {
    if (i < 2) args_[i++] = a;
  }
  start_us_ = now_us();
}

Span::~Span() {
  if (start_us_ < 0) return;
  add_event(Event{name_, 0, start_us_, now_us(), {args_[0], args_[1]}}, nullptr);
}

BucketScope::BucketScope(std::int64_t bucket) noexcept : previous_(t_bucket) { t_bucket = bucket; }
BucketScope::~BucketScope() { t_bucket = previous_; }
std::int64_t BucketScope::current() noexcept { return t_bucket; }

}  // namespace hpctrain::trace
