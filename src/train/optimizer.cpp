#include "hpctrain/train/optimizer.h"

#include <torch/optim.h>

#include "hpctrain/core/error.h"

namespace hpctrain::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                        std::vector<at::Tensor> parameters) {
  namespace optim = torch::optim;
  if (config.name == "adamw") {
    return std::make_unique<optim::AdamW>(
        std::move(parameters), optim::AdamWOptions(config.lr)
                                   .betas({config.beta1, config.beta2})
                                   .eps(config.eps)
                                   .weight_decay(config.weight_decay));
  }
  if (config.name == "sgd") {
    return std::make_unique<optim::SGD>(
        std::move(parameters),
        optim::SGDOptions(config.lr).momentum(config.momentum).weight_decay(config.weight_decay));
  }
  throw ConfigError("optim.name: unknown optimizer '" + config.name + "' (allowed: adamw|sgd)");
}

double current_lr(const torch::optim::Optimizer& optimizer) {
  return optimizer.param_groups().front().options().get_lr();
}

}  // namespace hpctrain::train
