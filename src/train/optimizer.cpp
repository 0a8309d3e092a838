#include "hpctrain/train/optimizer.h"

#include <torch/optim.h>

#include <map>

#include "hpctrain/core/error.h"

namespace hpctrain::train {
namespace {

namespace optim = torch::optim;

// Every parameter in one group, or (decay_bias_and_norm=false) those of two or more dimensions
// first and the rest, biases and norm weights, in a second group without weight decay.
template <typename Options>
std::vector<optim::OptimizerParamGroup> groups(const config::OptimConfig& config,
                                               const NamedParameters& parameters, const Options& options) {
  std::vector<at::Tensor> decayed;
  std::vector<at::Tensor> exempt;
  for (const auto& [name, tensor] : parameters) {
    (config.decay_bias_and_norm || tensor.dim() >= 2 ? decayed : exempt).push_back(tensor);
  }
  std::vector<optim::OptimizerParamGroup> out;
  out.emplace_back(decayed, std::make_unique<Options>(options));
  if (!exempt.empty()) {
    auto no_decay = std::make_unique<Options>(options);
    no_decay->weight_decay(0.0);
    out.emplace_back(exempt, std::move(no_decay));
  }
  return out;
}

}  // namespace

void check_optimizer_options(const config::OptimConfig& config) {
  if (config.nesterov && (config.name != config::OptimizerName::kSgd || config.momentum <= 0)) {
    throw ConfigError("optim.nesterov=true needs optim.name=sgd with optim.momentum > 0");
  }
}

std::unique_ptr<optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                 const NamedParameters& parameters) {
  check_optimizer_options(config);
  if (config.name == config::OptimizerName::kAdamW) {
    const auto options =
        optim::AdamWOptions(config.lr).betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    return std::make_unique<optim::AdamW>(groups(config, parameters, options), options);
  }
  const auto options = optim::SGDOptions(config.lr)
                           .momentum(config.momentum)
                           .nesterov(config.nesterov)
                           .weight_decay(config.weight_decay);
  return std::make_unique<optim::SGD>(groups(config, parameters, options), options);
}

std::vector<std::string> names_in_optimizer_order(const optim::Optimizer& optimizer,
                                                  const NamedParameters& parameters) {
  std::map<const void*, std::string> name_of;
  for (const auto& [name, tensor] : parameters) name_of[tensor.unsafeGetTensorImpl()] = name;
  std::vector<std::string> names;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) names.push_back(name_of.at(p.unsafeGetTensorImpl()));
  }
  return names;
}

double current_lr(const optim::Optimizer& optimizer) {
  return optimizer.param_groups().front().options().get_lr();
}

}  // namespace hpctrain::train
