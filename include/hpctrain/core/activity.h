// What this process's training thread is doing, for the rank watch (comm/rank_watch.h): the
// activity it is in and since when, the step, and how many collectives it has issued. Written by
// the training thread, read by the watch's thread: lock-free atomics. Depends on std only.
//
// Fault injection for the reliability tests (docs/reliability.md): HPCTRAIN_FAULT=MODE@RANK:WHERE
// makes world rank RANK, on first entering activity WHERE (a Kind's name: loader, collective,
// checkpoint, ...) or reaching fault_point(WHERE), either `stop` (SIGSTOP itself: a frozen node)
// or `hang` (the calling thread sleeps forever while the process lives on: a hung file system
// call); at a fault point also `delay` or `fail` (fault_point, below).
#pragma once

#include <cstdint>

namespace hpctrain::activity {

enum class Kind : int {
  kStarting,        // before the first step
  kStep,            // forward, backward and the optimizer
  kLoader,          // waiting for the loader's next batch
  kCollective,      // waiting for a collective to complete
  kInCollective,    // in a blocking collective on this thread (Communicator::allreduce_blocking)
  kCheckpoint,      // rank 0 writing a checkpoint (or its part), or waiting for its previous background write
  kCheckpointWait,  // in a checkpoint, waiting for the other ranks (gathering state, the barrier)
  kEvaluation,      // evaluating
  kFinishing,       // after the last step
};
// "loader" for kLoader: the names HPCTRAIN_FAULT takes.
const char* name(Kind kind);
// "waiting for the loader" for kLoader: for the watch's reports (which may carry another rank's
// kind: an unknown one reads "in an unknown activity").
const char* describe(Kind kind);
// How long the training thread may stay in `kind` before the rank watch ends the job, and the
// option (a string literal) that says so: set for what nothing else times, waiting for the loader,
// writing a checkpoint, a blocking collective. 0 (the default): no limit. Waiting for a
// collective has a timeout of its own; a step or an evaluation may rightly take long.
void set_limit(Kind kind, double seconds, const char* option);
struct Limit {
  double seconds = 0;
  const char* option = "";
};
Limit limit(Kind kind);

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

// HPCTRAIN_FAULT=MODE@RANK:collective#N, for the flight recorder's tests: what world rank RANK
// does to the first collective that asks, numbered N or later (counted as count_collective
// counts), once, saying so on stderr with the time. kSkip: it never issues it; kResize: it issues
// it one element short; sleep: it sleeps forever before issuing it (the call never returns).
// The MPI communicator's allreduce asks (the gradient buckets' path on CPUs).
enum class CollectiveFault { kNone, kSkip, kResize };
CollectiveFault collective_fault(std::int64_t number);
// The number the next collective will get (count_collective's next value).
std::int64_t next_collective();

// Enters `kind` from now on.
void enter(Kind kind);
// A place, not an activity, where HPCTRAIN_FAULT may strike (any thread): "checkpoint-write",
// the start of rank 0's write, or of a rank's part of a sharded one, on the background thread with
// ckpt.async. Two more modes act only here: `delay` sleeps 3 s and goes on (a slow write); `fail`
// throws CheckpointError, as a failed write would.
void fault_point(const char* where);

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
