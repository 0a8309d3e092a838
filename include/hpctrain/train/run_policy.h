// What happens after a step besides the step itself: a progress record (log.every_steps, and the
// last step of an epoch or of the run: records()), a checkpoint (ckpt.every_steps, or
// ckpt.every_minutes by rank 0's clock), an evaluation (train.eval_every), a stop on a signal to
// any rank (ckpt.signals); and where the run ends (train.max_steps: limit_reached()). Counting
// decisions are pure; the signal and the clock are agreed by all ranks in one small collective on
// the control plane (Note [Step boundary]). Depends on config, comm's ControlPlane and core.
#pragma once

#include <cstdint>

#include "hpctrain/comm/control_plane.h"
#include "hpctrain/config/config.h"
#include "hpctrain/core/timer.h"

namespace hpctrain::train {

struct AfterStep {
  bool stop = false;        // a stop signal reached a rank: checkpoint, then end the run (exit 75)
  bool checkpoint = false;  // a periodic checkpoint is due
  bool evaluate = false;    // train.eval_every is due (an epoch's end evaluates anyway)
};

class RunPolicy {
 public:
  RunPolicy(const config::Config& config, comm::ControlPlane& control);

  // train.max_steps reached after `steps` optimizer steps.
  bool limit_reached(std::int64_t steps) const;
  // Step `step` (counted from 1) is the last of its epoch (`last_of_epoch`) or of the run.
  bool is_last(std::int64_t step, bool last_of_epoch) const;
  // Step `step` ends a log interval: it gets a progress record (its gradient norm is wanted).
  bool records(std::int64_t step, bool last) const;

  // Collective: what follows step `step` (counted from 1; `last` as is_last says).
  AfterStep after_step(std::int64_t step, bool last);
  // A checkpoint was written: ckpt.every_minutes counts from now.
  void checkpoint_written() { since_checkpoint_.reset(); }

 private:
  struct Boundary {
    bool stop = false;
    bool checkpoint_due = false;
  };
  Boundary agree_at_boundary(std::int64_t step);

  config::Config config_;
  comm::ControlPlane& control_;
  Timer since_checkpoint_;  // for ckpt.every_minutes (rank 0's decides)
};

}  // namespace hpctrain::train
