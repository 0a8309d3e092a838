#include "hpctrain/sharding/strategy.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "hpctrain/model/model.h"
#include "hpctrain/sharding/gradient_update.h"

namespace hpctrain::sharding {
namespace {

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

}  // namespace

std::string Strategy::refusal(const config::Config& config) const {
  if (shards_parameters() && config.model.name == config::ModelName::kTorchscript) {
    return option() + " with model.name=torchscript: stage 3 gathers the parameters block by block, and a "
                      "TorchScript module's forward cannot be split into blocks; use dist.zero_stage=2";
  }
  return "";
}

std::string Strategy::model_refusal(const optim::NamedParameters& trainable, model::Model& model) const {
  if (!shards_state()) return "";
  for (const auto& [name, parameter] : trainable) {
    if (parameter.is_contiguous() && parameter.scalar_type() == at::kFloat) continue;
    return option() + " shards contiguous float32 parameters; '" + name + "' is " +
           (parameter.is_contiguous() ? "" : "non-contiguous ") + c10::toString(parameter.scalar_type()) +
           ": use dist.zero_stage=0 for this model";
  }
  if (shards_parameters() && model.blocks().empty()) {
    return option() + " gathers parameters block by block, and this model has no blocks: use dist.zero_stage=2";
  }
  return "";
}

std::int64_t Strategy::state_bytes(std::int64_t elements, std::int64_t bytes, const config::Config& config,
                                   int world_size) const {
  const std::int64_t shards = std::max(1, world_size);
  const std::int64_t gradients = shards_gradients() ? ceil_div(bytes, shards) : bytes;
  const std::int64_t state_elements = shards_state() ? ceil_div(elements, shards) : elements;
  // A moving average of the weights is sharded as the optimizer state is.
  const std::int64_t average = config.train.ema_decay <= 0 ? 0 : shards_state() ? ceil_div(bytes, shards) : bytes;
  return gradients + state_elements * optim::optimizer_state_bytes_per_element(config.optim) + average;
}

std::unique_ptr<GradientUpdate> Strategy::make_update(const config::Config& config, comm::Communicator& comm,
                                                      const optim::NamedParameters& trainable,
                                                      model::Model& model) const {
  if (!shards_state()) return replicated_update(config, comm, trainable);
  return sharded_update(config, comm, trainable, model);
}

}  // namespace hpctrain::sharding
