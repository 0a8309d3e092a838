// Note [Flight recorder]: every rank remembers its last dist.flight_records collectives: number,
// operation, bytes, dtype, gradient bucket, when it was issued, started and ended, and its state.
// When a job ends on a hang or an error, what each rank last did tells where they parted. So on a
// collective's timeout, a silent or stuck rank, a fatal error or SIGUSR2, a rank writes its
// records to <run.dir>/flight/rank-<r>.json, and one that ends the job also asks the others to
// (a request file in that directory, which every rank's watch thread looks for at each beat:
// it works when MPI is stuck), waits a moment for their files, and names in its last message
// the first collective where the ranks disagree (comm/flight_analysis.h). Depends on core.
#pragma once

#include <cstdint>
#include <string>

namespace hpctrain::comm::flight {

enum class State : int { kIssued, kStarted, kCompleted, kFailed };
const char* name(State state);

struct Record {
  std::int64_t number = 0;  // this rank's collective number, from 1 (activity::count_collective)
  std::string op;           // "allreduce"
  std::int64_t bytes = 0;
  std::string dtype;        // "float32"
  std::int64_t bucket = -1;  // the gradient bucket it reduces, or -1
  double issued_us = 0;      // microseconds since the Unix epoch (core/trace.h's clock)
  double started_us = -1;    // -1: not yet
  double ended_us = -1;
  State state = State::kIssued;
};

// Keeps the last `capacity` collectives (0: none) and dumps them to <dir>/rank-<rank>.json,
// removing a dump of an earlier run there. Before it is called nothing is kept. `timeout_s`
// (dist.timeout_s) sets the rank watch's beat, and so how long a rank that ends the job waits for
// the others' dumps.
void configure(std::int64_t capacity, const std::string& dir, int rank, double timeout_s);

// A collective is issued: counts it (activity::count_collective) and returns its number. `dtype`
// is a string literal.
std::int64_t issue(const char* op, std::int64_t bytes, const char* dtype);
void start(std::int64_t number);
void end(std::int64_t number, bool ok);

// A blocking collective on the calling thread, recorded from construction (issued and started)
// to destruction (completed; failed when an exception unwinds): the control plane's calls.
class Blocking {
 public:
  Blocking(const char* op, std::int64_t bytes, const char* dtype);
  ~Blocking();
  Blocking(const Blocking&) = delete;
  Blocking& operator=(const Blocking&) = delete;
  std::int64_t number() const { return number_; }

 private:
  std::int64_t number_;
  int exceptions_;
};

// Writes this rank's records to its dump file, saying why; returns the path, or "" when nothing is
// kept or the write failed (a warning then). Any thread; the last reason wins.
std::string dump(const std::string& reason);

// For the watch thread at each beat: dumps when SIGUSR2 arrived, or when another rank asked
// (the request file), once per request.
void dump_if_asked();

// A rank that ends the job: dumps, asks every rank to, waits (two of the watch's beats and a
// second at most) for the dumps of all `world_size` ranks, and returns the analysis of those there
// ("" when nothing is kept).
std::string dump_everywhere_and_analyse(const std::string& reason, int world_size);

// Installs the SIGUSR2 handler (unless `usr2_is_taken`: ckpt.signals stops the run on it).
void handle_usr2(bool usr2_is_taken);

}  // namespace hpctrain::comm::flight
