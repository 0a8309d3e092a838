#include "hpctrain/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace hpctrain::train {

double lr_at(const config::OptimConfig& optim, std::int64_t step, std::int64_t total_steps) {
  if (step < optim.warmup_steps) {
    return optim.lr * static_cast<double>(step + 1) / static_cast<double>(optim.warmup_steps);
  }
  if (optim.schedule != "cosine") return optim.lr;
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - optim.warmup_steps);
  const double progress =
      std::min(1.0, static_cast<double>(step - optim.warmup_steps) / static_cast<double>(decay_steps));
  return optim.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hpctrain::train
