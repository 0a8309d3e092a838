// Builds the optimizer named by `optim.name` over a list of parameters.
// Depends on config and torch (forward-declared here).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "hpctrain/config/config.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace hpctrain::train {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                        std::vector<at::Tensor> parameters);

// The learning rate of the first parameter group.
double current_lr(const torch::optim::Optimizer& optimizer);

}  // namespace hpctrain::train
