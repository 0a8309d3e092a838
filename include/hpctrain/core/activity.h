// What this process's training thread is doing, for the rank watch (comm/rank_watch.h): the
// activity it is in and since when, the step, and how many collectives it has issued. Written by
// the training thread, read by the watch's thread: lock-free atomics. Depends on std only.
//
// Fault injection for the reliability tests (docs/reliability.md): HPCTRAIN_FAULT=MODE@RANK:WHERE
// makes world rank RANK, on first entering activity WHERE (a Kind's name: loader, collective,
// checkpoint, ...), either `stop` (SIGSTOP itself: a frozen node) or `hang` (the training thread
// sleeps forever while the process lives on: a hung file system call).
#pragma once

#include <cstdint>

namespace hpctrain::activity {

enum class Kind : int {
  kStarting,     // before the first step
  kStep,         // forward, backward and the optimizer
  kLoader,       // waiting for the loader's next batch
  kCollective,   // waiting for a collective to complete
  kCheckpoint,   // writing a checkpoint, or waiting for rank 0 to finish one
  kEvaluation,   // evaluating
  kFinishing,    // after the last step
};
// "loader" for kLoader: the names HPCTRAIN_FAULT takes.
const char* name(Kind kind);
// "waiting for the loader" for kLoader: for the watch's reports (which may carry another rank's
// kind: an unknown one reads "in an unknown activity").
const char* describe(Kind kind);
// Whether a healthy rank finishes the activity well within dist.timeout_s, and nothing else
// times it: waiting for the loader. (A collective has a timeout of its own; a step, a checkpoint
// write or an evaluation may rightly take longer.)
bool is_bounded(Kind kind);

struct Snapshot {
  Kind kind = Kind::kStarting;
  double seconds_in = 0;         // since the activity began
  std::int64_t step = 0;         // optimizer steps taken
  std::int64_t collectives = 0;  // issued by this rank
};
Snapshot now();

// This process's world rank, for HPCTRAIN_FAULT; set once MPI has started.
void set_rank(int world_rank);
void set_step(std::int64_t step);
// One more collective issued; returns its number (1, 2, ...).
std::int64_t count_collective();

// Enters `kind` from now on.
void enter(Kind kind);

// Enters `kind` for its lifetime, then returns to the activity before it (and its clock).
class Scope {
 public:
  explicit Scope(Kind kind);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  std::uint64_t previous_;
};

}  // namespace hpctrain::activity
