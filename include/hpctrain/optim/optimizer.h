// Builds the optimizer named by `optim.name` over a model's named parameters: SGD (momentum,
// Nesterov) or AdamW, with weight decay on every parameter or, with optim.decay_bias_and_norm=false,
// only on those of two or more dimensions (a second parameter group without decay).
// Depends on config and torch (forward-declared here).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/config/config.h"

namespace torch::optim {
class Optimizer;
}  // namespace torch::optim

namespace hpctrain::optim {

using NamedParameters = std::vector<std::pair<std::string, at::Tensor>>;

// Throws ConfigError for options the optimizer cannot use (Nesterov without momentum, or with AdamW).
void check_optimizer_options(const config::OptimConfig& config);

// Checks the options as above, then builds the optimizer.
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                        const NamedParameters& parameters);

// Whether weight decay applies to a parameter of `dims` dimensions (optim.decay_bias_and_norm).
bool decays(const config::OptimConfig& config, std::int64_t dims);
// As above, with weight decay on parameters[i] exactly where `decayed[i]` (a sharded optimizer's
// flat pieces decay as the parameters they are cut from).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                        const NamedParameters& parameters,
                                                        const std::vector<bool>& decayed);

// The parameters' names in the optimizer's order (group by group), which its state follows.
std::vector<std::string> names_in_optimizer_order(const torch::optim::Optimizer& optimizer,
                                                  const NamedParameters& parameters);

// The learning rate of the first parameter group.
double current_lr(const torch::optim::Optimizer& optimizer);

// Bytes of optimizer state per element of a parameter: AdamW's two moments, SGD's momentum buffer
// (none without momentum).
std::int64_t optimizer_state_bytes_per_element(const config::OptimConfig& optim);

}  // namespace hpctrain::optim
