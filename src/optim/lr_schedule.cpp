#include "hpctrain/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "hpctrain/core/error.h"

namespace hpctrain::optim {

void check_schedule_options(const config::OptimConfig& optim) {
  if (optim.schedule == config::Schedule::kStep && optim.step_every == 0) {
    throw ConfigError("optim.schedule=step needs optim.step_every > 0 (optimizer steps between drops)");
  }
  if (optim.lr_scaling != config::LrScaling::kNone && optim.base_batch == 0) {
    throw ConfigError(std::string("optim.lr_scaling=") + config::name_of(optim.lr_scaling) + " needs optim.base_batch: the global batch "
                      "optim.lr was tuned for");
  }
}

double peak_lr(const config::OptimConfig& optim, std::int64_t global_batch) {
  if (optim.lr_scaling == config::LrScaling::kNone) return optim.lr;
  const double ratio = static_cast<double>(global_batch) / static_cast<double>(optim.base_batch);
  return optim.lr * (optim.lr_scaling == config::LrScaling::kSqrt ? std::sqrt(ratio) : ratio);
}

double lr_at(const config::OptimConfig& optim, double peak, std::int64_t step, std::int64_t total_steps) {
  if (step < optim.warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(optim.warmup_steps);
  }
  const std::int64_t after_warmup = step - optim.warmup_steps;
  if (optim.schedule == config::Schedule::kStep) {
    return peak * std::pow(optim.step_gamma, static_cast<double>(after_warmup / optim.step_every));
  }
  if (optim.schedule != config::Schedule::kCosine) return peak;
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - optim.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(after_warmup) / static_cast<double>(decay_steps));
  return peak * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace hpctrain::optim
