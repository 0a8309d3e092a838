// A timeline of one rank's work (log.trace_steps, docs/monitoring.md): spans for waiting on data,
// forward, backward, each bucket's reduction on the communication thread, the update, checkpoint
// writes and evaluation, each on its thread's track, written as Chrome trace events (Perfetto and
// chrome://tracing open them). Tracing off, a span costs one relaxed atomic load and a branch.
// Depends on std only.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

namespace hpctrain::trace {

// A number shown with a span ("bucket": 3). `key` is a string literal.
struct Arg {
  const char* key = nullptr;
  std::int64_t value = 0;
};

// Records steps first..last (optimizer steps, counted from 1 as metrics.jsonl counts them) of
// world rank `rank`, and writes them to `path` (rank-<r>.json) after step `last` or at finish().
void start(const std::string& path, int rank, std::int64_t first, std::int64_t last);
// The training thread: optimizer step `step` begins. Recording is on within the range; past it,
// the file is written.
void begin_step(std::int64_t step);
// Writes what was recorded, once: the run ended (or stopped) before step `last`.
void finish();
bool recording();

// Names the calling thread's track: "train", "comm", "checkpoint".
void name_thread(const std::string& name);

// Microseconds since the unix epoch on a steady clock, the spans' time base: ranks on hosts with
// synchronized clocks line up.
double now_us();

// A finished span on the track named `track` (a string literal) rather than the calling thread's:
// for work no host thread runs, a NCCL collective on its stream.
void add_span(const char* track, const char* name, double start_us, double end_us,
              std::initializer_list<Arg> args = {});

// One span of the calling thread, from construction to destruction. `name` is a string literal.
class Span {
 public:
  explicit Span(const char* name, std::initializer_list<Arg> args = {}) noexcept;
  ~Span();
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  const char* name_;
  double start_us_ = -1;  // < 0: not recording
  Arg args_[2];
};

// The gradient bucket whose collective the calling thread issues in this scope (-1 outside any),
// so the communicator can label the collective's span on its own thread.
class BucketScope {
 public:
  explicit BucketScope(std::int64_t bucket) noexcept;
  ~BucketScope();
  BucketScope(const BucketScope&) = delete;
  BucketScope& operator=(const BucketScope&) = delete;
  static std::int64_t current() noexcept;

 private:
  std::int64_t previous_;
};

}  // namespace hpctrain::trace
