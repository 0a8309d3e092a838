#include "hpctrain/sharding/weight_average.h"

#include <torch/torch.h>

#include "hpctrain/core/error.h"

namespace hpctrain::sharding {

ckpt::TensorSlices whole_slices(const optim::NamedParameters& weights) {
  ckpt::TensorSlices slices;
  for (const auto& [name, tensor] : weights) slices.push_back({name, tensor.sizes().vec(), 0, tensor});
  return slices;
}

WeightAverage::WeightAverage(ckpt::TensorSlices weights, double decay, bool sharded)
    : weights_(std::move(weights)), decay_(decay), sharded_(sharded) {
  const torch::NoGradGuard no_grad;
  for (const ckpt::TensorSlice& weight : weights_) {
    averages_.push_back({weight.name, weight.shape, weight.offset, weight.data.detach().clone()});
  }
}

WeightAverage WeightAverage::of_update(const UpdateState& update, model::Model& model, double decay,
                                      bool sharded) {
  ckpt::TensorSlices weights = update.owned_weights();
  const size_t owned = weights.size();
  for (const model::TiedParameter& tied : model.tied_parameters()) {
    for (size_t i = 0; i < owned; ++i) {
      if (weights[i].name != tied.same_as) continue;
      ckpt::TensorSlice second = weights[i];
      second.name = tied.name;
      weights.push_back(std::move(second));
    }
  }
  return WeightAverage(std::move(weights), decay, sharded);
}

void WeightAverage::update() {
  const torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) averages_[i].data.lerp_(weights_[i].data.detach(), 1.0 - decay_);
}

void WeightAverage::restart() {
  const torch::NoGradGuard no_grad;
  for (size_t i = 0; i < weights_.size(); ++i) averages_[i].data.copy_(weights_[i].data.detach());
}

void WeightAverage::add_to(ckpt::Checkpoint& checkpoint) const {
  if (sharded_) {
    ckpt::TensorSlices& slices = checkpoint.slices[ckpt::group::kEma];
    slices.insert(slices.end(), averages_.begin(), averages_.end());
    return;
  }
  ckpt::NamedTensors& whole = checkpoint.groups[ckpt::group::kEma];
  for (const ckpt::TensorSlice& average : averages_) whole.emplace_back(average.name, average.data);
}

void WeightAverage::load(const ckpt::CheckpointReader& reader) {
  if (!sharded_) {
    ckpt::NamedTensors targets;
    for (const ckpt::TensorSlice& average : averages_) targets.emplace_back(average.name, average.data);
    reader.read_into(ckpt::group::kEma, targets);
    return;
  }
  const torch::NoGradGuard no_grad;
  for (const ckpt::TensorSlice& average : averages_) {
    if (!reader.has(ckpt::group::kEma, average.name)) {
      throw CheckpointError(reader.path() + ": its moving average (ema group) holds no '" + average.name +
                            "'; check model.name and the model options");
    }
    const std::vector<std::int64_t> stored = reader.stored_shape(ckpt::group::kEma, average.name);
    if (stored != average.shape) {
      throw CheckpointError(reader.path() + ": ema/" + average.name + " is of shape " +
                            c10::str(at::IntArrayRef(stored)) + " in the checkpoint but " +
                            c10::str(at::IntArrayRef(average.shape)) + " here");
    }
    const at::Tensor host = at::empty({average.data.numel()}, average.data.options().device(at::kCPU));
    reader.read_slice(ckpt::group::kEma, average.name, average.offset, host);
    average.data.view({-1}).copy_(host);
  }
}

void WeightAverage::with_averaged_weights(const std::function<void()>& use,
                                          const std::function<void()>& weights_changed) {
  const torch::NoGradGuard no_grad;
  std::vector<at::Tensor> kept;
  kept.reserve(weights_.size());
  for (size_t i = 0; i < weights_.size(); ++i) {
    at::Tensor weight = weights_[i].data.detach();
    kept.push_back(weight.clone());
    weight.copy_(averages_[i].data);
  }
  const auto put_back = [&] {
    for (size_t i = 0; i < weights_.size(); ++i) weights_[i].data.detach().copy_(kept[i]);
  };
  if (weights_changed) weights_changed();
  try {
    use();
  } catch (...) {
    put_back();
    throw;
  }
  put_back();
  if (weights_changed) weights_changed();
}

std::int64_t WeightAverage::bytes() const {
  std::int64_t total = 0;
  for (const ckpt::TensorSlice& average : averages_) total += static_cast<std::int64_t>(average.data.nbytes());
  return total;
}

}  // namespace hpctrain::sharding
