// The learning rate as a pure function of the optimizer step: linear warmup over
// optim.warmup_steps, then constant, a step decay (x optim.step_gamma every optim.step_every
// steps) or a cosine decay to 0 at the last step. The peak is optim.lr, scaled with the global
// batch by optim.lr_scaling. Being a function of the step alone, a schedule's whole state is the
// step count, which checkpoints keep. Depends on config only.
#pragma once

#include <cstdint>

#include "hpctrain/config/config.h"

namespace hpctrain::optim {

// The options that only make sense together: throws ConfigError naming them.
void check_schedule_options(const config::OptimConfig& optim);

// optim.lr scaled for a step of `global_batch` samples: x global/base (linear), x sqrt(global/base)
// (sqrt), or unchanged (none).
double peak_lr(const config::OptimConfig& optim, std::int64_t global_batch);

// The rate for optimizer step `step` (0 for the first) of a run of `total_steps` steps.
double lr_at(const config::OptimConfig& optim, double peak, std::int64_t step, std::int64_t total_steps);

}  // namespace hpctrain::optim
