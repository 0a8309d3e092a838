// log.profile_steps: each libtorch operator of optimizer steps A..B timed by libtorch's profiler
// (its legacy, RecordFunction-based form, which every libtorch has, Kineto or not), and summed as
// PyTorch's key_averages() sums them: calls, self CPU time (the operator less the operators it
// called) and total CPU time, per name. Written to <run.dir>/profile/rank-<r>.tsv when step B
// ends. Depends on config and core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"

namespace hpctrain::observe {

// One operator's line of the table.
struct OpTime {
  std::string name;
  std::int64_t calls = 0;
  double self_ms = 0;
  double total_ms = 0;
};

// The profiler's events as they nest on each thread: each is a push (an operator entered at
// `us`) or a pop (the innermost one left); summed per name, most self time first.
struct OpEvent {
  bool push = false;
  std::string name;  // of a push
  double us = 0;
};
std::vector<OpTime> sum_op_times(const std::vector<std::vector<OpEvent>>& threads);

class OpProfile {
 public:
  // `range` empty: every call is a no-op.
  OpProfile(config::StepRange range, std::string path);
  ~OpProfile();
  OpProfile(const OpProfile&) = delete;
  OpProfile& operator=(const OpProfile&) = delete;

  // Around the work of optimizer step `step` (counted from 1).
  void before_step(std::int64_t step);
  void after_step(std::int64_t step);

 private:
  config::StepRange range_;
  std::string path_;
  bool on_ = false;
  std::vector<std::vector<OpEvent>> events_;  // of the steps profiled so far, a list per thread and step
  double wall_ms_ = 0;                        // their work's wall time
  std::int64_t steps_ = 0;
  double started_ = 0;
};

}  // namespace hpctrain::observe
