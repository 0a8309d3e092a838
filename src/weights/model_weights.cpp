#include "hpctrain/weights/model_weights.h"

#include <torch/torch.h>

#include <set>
#include <string>

#include "hpctrain/model/lora.h"

namespace hpctrain::weights {
namespace {

// The parameters (a LoRA model's frozen base among them or not), buffers and tied names.
ckpt::NamedTensors named_weights(model::Model& model, bool with_frozen_base) {
  ckpt::NamedTensors out;
  std::set<std::string> left_out;
  for (auto& p : model.module().named_parameters()) {
    if (with_frozen_base || p.value().requires_grad()) {
      out.emplace_back(p.key(), p.value());
    } else {
      left_out.insert(p.key());
    }
  }
  for (auto& b : model_buffers(model)) out.push_back(std::move(b));
  for (const auto& tied : model.tied_parameters()) {
    if (left_out.count(tied.same_as) == 0) out.emplace_back(tied.name, tied.tensor);
  }
  return out;
}

}  // namespace

ckpt::NamedTensors model_state(model::Model& model) { return named_weights(model, !model::has_adapters(model)); }

ckpt::NamedTensors all_weights(model::Model& model) { return named_weights(model, true); }

ckpt::NamedTensors model_buffers(model::Model& model) {
  ckpt::NamedTensors out;
  for (auto& b : model.module().named_buffers()) out.emplace_back(b.key(), b.value());
  return out;
}

ckpt::NamedTensors trainable_parameters(torch::nn::Module& module) {
  ckpt::NamedTensors named;
  for (const auto& p : module.named_parameters()) {
    if (p.value().requires_grad()) named.emplace_back(p.key(), p.value());
  }
  return named;
}

ckpt::NamedTensors averaged_parameters(model::Model& model) {
  ckpt::NamedTensors weights = trainable_parameters(model.module());
  std::set<std::string> trainable;
  for (const auto& [name, parameter] : weights) trainable.insert(name);
  for (const model::TiedParameter& tied : model.tied_parameters()) {
    if (trainable.count(tied.same_as) > 0) weights.emplace_back(tied.name, tied.tensor);
  }
  return weights;
}

}  // namespace hpctrain::weights
