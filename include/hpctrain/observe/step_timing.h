// What the progress line and metrics.jsonl say about time: where a step's wall time went on this
// rank over one log interval, and how long the run has left. Times are the host's clock: on a GPU,
// kernels still running show up in whichever part next waits for them. Depends on std only.
#pragma once

#include <cstdint>
#include <string>

namespace hpctrain::observe {

struct IntervalTimes {
  std::int64_t steps = 0;  // optimizer steps in the interval
  double data_s = 0.0;     // waiting for the loader's batches and starting their copies
  double comm_s = 0.0;     // waiting for the gradient allreduce after the backward pass

  void reset() { *this = IntervalTimes{}; }
};

// Per optimizer step, in milliseconds, over an interval of `wall_s` seconds.
struct StepBreakdown {
  double step_ms = 0.0;
  double data_ms = 0.0;
  double comm_ms = 0.0;
  double compute_ms = 0.0;  // the rest: forward, backward, optimizer, and any checkpoint or evaluation
};
StepBreakdown breakdown(const IntervalTimes& times, double wall_s);

// "2h05m", "3m12s", "45s".
std::string format_duration(double seconds);

}  // namespace hpctrain::observe
