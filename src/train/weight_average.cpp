#include "hpctrain/train/weight_average.h"

#include <torch/torch.h>

#include <set>

#include "hpctrain/train/gradient_update.h"

namespace hpctrain::train {

NamedParameters averaged_parameters(model::Model& model) {
  NamedParameters weights = trainable_parameters(model.module());
  std::set<std::string> trainable;
  for (const auto& [name, parameter] : weights) trainable.insert(name);
  for (const model::TiedParameter& tied : model.tied_parameters()) {
    if (trainable.count(tied.same_as) > 0) weights.emplace_back(tied.name, tied.tensor);
  }
  return weights;
}

WeightAverage::WeightAverage(NamedParameters weights, double decay)
    : parameters_(std::move(weights)), decay_(decay) {
  const torch::NoGradGuard no_grad;
  for (const auto& [name, parameter] : parameters_) averages_.emplace_back(name, parameter.detach().clone());
}

void WeightAverage::update() {
  const torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    averages_[i].second.lerp_(parameters_[i].second.detach(), 1.0 - decay_);
  }
}

void WeightAverage::restart() {
  const torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) averages_[i].second.copy_(parameters_[i].second.detach());
}

void WeightAverage::with_averaged_parameters(const std::function<void()>& use) {
  const torch::NoGradGuard no_grad;
  std::vector<at::Tensor> kept;
  kept.reserve(parameters_.size());
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor parameter = parameters_[i].second.detach();
    kept.push_back(parameter.clone());
    parameter.copy_(averages_[i].second);
  }
  const auto put_back = [&] {
    for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].second.detach().copy_(kept[i]);
  };
  try {
    use();
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
}

std::int64_t WeightAverage::bytes() const {
  std::int64_t total = 0;
  for (const auto& [name, average] : averages_) total += static_cast<std::int64_t>(average.nbytes());
  return total;
}

}  // namespace hpctrain::train
