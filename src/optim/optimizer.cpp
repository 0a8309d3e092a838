#include "hpctrain/optim/optimizer.h"

#include <torch/optim.h>

#include <map>

#include "hpctrain/core/error.h"
#include "hpctrain/optim/multi_tensor_adamw.h"

namespace hpctrain::optim {
namespace {

namespace torch_optim = torch::optim;

// The parameters that decay in one group, the rest (biases and norm weights, with
// decay_bias_and_norm=false) in a second group without weight decay.
template <typename Options>
std::vector<torch_optim::OptimizerParamGroup> groups(const NamedParameters& parameters, const std::vector<bool>& decay,
                                               const Options& options) {
  std::vector<at::Tensor> decayed;
  std::vector<at::Tensor> exempt;
  for (size_t i = 0; i < parameters.size(); ++i) (decay[i] ? decayed : exempt).push_back(parameters[i].second);
  std::vector<torch_optim::OptimizerParamGroup> out;
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

bool decays(const config::OptimConfig& config, std::int64_t dims) {
  return config.decay_bias_and_norm || dims >= 2;
}

std::unique_ptr<torch_optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                 const NamedParameters& parameters) {
  std::vector<bool> decayed;
  for (const auto& named : parameters) decayed.push_back(decays(config, named.second.dim()));
  return make_optimizer(config, parameters, decayed);
}

std::unique_ptr<torch_optim::Optimizer> make_optimizer(const config::OptimConfig& config,
                                                 const NamedParameters& parameters,
                                                 const std::vector<bool>& decayed) {
  check_optimizer_options(config);
  if (config.name == config::OptimizerName::kAdamW) {
    const auto options =
        torch_optim::AdamWOptions(config.lr).betas({config.beta1, config.beta2}).eps(config.eps).weight_decay(config.weight_decay);
    if (config.fused) return std::make_unique<MultiTensorAdamW>(groups(parameters, decayed, options), options);
    return std::make_unique<torch_optim::AdamW>(groups(parameters, decayed, options), options);
  }
  const auto options = torch_optim::SGDOptions(config.lr)
                           .momentum(config.momentum)
                           .nesterov(config.nesterov)
                           .weight_decay(config.weight_decay);
  return std::make_unique<torch_optim::SGD>(groups(parameters, decayed, options), options);
}

std::vector<std::string> names_in_optimizer_order(const torch_optim::Optimizer& optimizer,
                                                  const NamedParameters& parameters) {
  std::map<const void*, std::string> name_of;
  for (const auto& [name, tensor] : parameters) name_of[tensor.unsafeGetTensorImpl()] = name;
  std::vector<std::string> names;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) names.push_back(name_of.at(p.unsafeGetTensorImpl()));
  }
  return names;
}

double current_lr(const torch_optim::Optimizer& optimizer) {
  return optimizer.param_groups().front().options().get_lr();
}

std::int64_t optimizer_state_bytes_per_element(const config::OptimConfig& optim) {
  const std::int64_t moments = optim.name == config::OptimizerName::kAdamW ? 2 : optim.momentum > 0 ? 1 : 0;
  return moments * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace hpctrain::optim
