#include "hpctrain/train/run_policy.h"

#include "hpctrain/core/log.h"
#include "hpctrain/core/stop_signals.h"

namespace hpctrain::train {

RunPolicy::RunPolicy(const config::Config& config, comm::ControlPlane& control)
    : config_(config), control_(control) {}

bool RunPolicy::limit_reached(std::int64_t steps) const {
  return config_.train.max_steps > 0 && steps >= config_.train.max_steps;
}

bool RunPolicy::is_last(std::int64_t step, bool last_of_epoch) const {
  return last_of_epoch || limit_reached(step);
}

bool RunPolicy::records(std::int64_t step, bool last) const {
  return step % config_.log.every_steps == 0 || last;
}

AfterStep RunPolicy::after_step(std::int64_t step, bool last) {
  AfterStep next;
  const Boundary boundary = agree_at_boundary(step);
  next.stop = boundary.stop;
  const std::int64_t every = config_.ckpt.every_steps;
  next.checkpoint = !next.stop && (boundary.checkpoint_due || (every > 0 && step % every == 0));
  const std::int64_t eval_every = config_.train.eval_every;
  next.evaluate = !next.stop && eval_every > 0 && step % eval_every == 0 && !last;
  return next;
}

// Note [Step boundary]: whether to stop (a signal reached any rank) and whether a timed
// checkpoint is due (rank 0's clock decides), agreed by all ranks in one allreduce of two flags
// on the control plane. At a step boundary no collective of the communicator is in flight, so
// the control plane's MPI calls are safe here.
RunPolicy::Boundary RunPolicy::agree_at_boundary(std::int64_t step) {
  const double every_minutes = config_.ckpt.every_minutes;
  if (config_.ckpt.signals.empty() && every_minutes <= 0) return {};
  if (step % config_.ckpt.check_every_steps != 0) return {};
  float flags[2] = {sys::stop_signal() != 0 ? 1.0f : 0.0f,
                    control_.world_rank() == 0 && every_minutes > 0 &&
                            since_checkpoint_.elapsed_s() >= every_minutes * 60
                        ? 1.0f
                        : 0.0f};
  if (control_.world_size() > 1) control_.allreduce_sum(flags, 2);
  if (flags[0] > 0 && control_.world_rank() == 0) {
    log::warn("stop requested ({} on {} rank(s)); writing a checkpoint at step {}",
              sys::stop_signal() != 0 ? sys::signal_name(sys::stop_signal()) : "a signal",
              static_cast<int>(flags[0]), step);
  }
  return {flags[0] > 0, flags[1] > 0};
}

}  // namespace hpctrain::train
