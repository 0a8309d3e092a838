// The learning rate as a pure function of the optimizer step: linear warmup over
// optim.warmup_steps, then constant or a cosine decay to 0 at the last step. Being a function of
// the step alone, a schedule's whole state is the step count, which checkpoints keep.
// Depends on config only.
#pragma once

#include <cstdint>

#include "hpctrain/config/config.h"

namespace hpctrain::train {

// The rate for optimizer step `step` (0 for the first) of a run of `total_steps` steps.
double lr_at(const config::OptimConfig& optim, std::int64_t step, std::int64_t total_steps);

}  // namespace hpctrain::train
