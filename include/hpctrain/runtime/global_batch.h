// How many micro-batches make one optimizer step. train.global_batch, when set, fixes the
// samples per step whatever the world size, so a run resumed on another number of ranks keeps
// its global batch (and learning rate); otherwise train.accum_steps decides. Depends on config.
#pragma once

#include <cstdint>

#include "hpctrain/config/config.h"

namespace hpctrain::runtime {

// Throws ConfigError when train.global_batch is not a multiple of world_size x train.batch_size,
// or is set together with train.accum_steps.
std::int64_t accumulation_steps(const config::TrainConfig& train, int world_size);

}  // namespace hpctrain::runtime
