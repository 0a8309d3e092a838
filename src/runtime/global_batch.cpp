#include "hpctrain/runtime/global_batch.h"

#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::runtime {

std::int64_t accumulation_steps(const config::TrainConfig& train, int world_size) {
  if (train.global_batch == 0) return train.accum_steps;
  if (train.accum_steps != 1) {
    throw ConfigError("train.global_batch=" + std::to_string(train.global_batch) + " and train.accum_steps=" +
                      std::to_string(train.accum_steps) + " both set the accumulation; set only one");
  }
  const std::int64_t per_micro_batch = world_size * train.batch_size;
  if (train.global_batch % per_micro_batch != 0) {
    throw ConfigError("train.global_batch=" + std::to_string(train.global_batch) + " is not a multiple of " +
                      std::to_string(world_size) + " rank(s) x train.batch_size=" +
                      std::to_string(train.batch_size) + " = " + std::to_string(per_micro_batch) +
                      "; choose a global batch, batch size and rank count that divide");
  }
  return train.global_batch / per_micro_batch;
}

}  // namespace hpctrain::runtime
