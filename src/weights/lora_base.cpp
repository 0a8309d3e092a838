#include "hpctrain/weights/lora_base.h"

#include <torch/torch.h>

#include <map>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/io/fletcher32.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/weights/init_from.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::weights {

ckpt::NamedTensors base_checksums(model::Model& model) {
  ckpt::NamedTensors out;
  if (!model::has_adapters(model)) return out;
  for (const auto& p : model.module().named_parameters()) {
    if (p.value().requires_grad()) continue;
    const at::Tensor host = p.value().detach().to(torch::kCPU).contiguous();
    const std::uint32_t sum = io::fletcher32(host.data_ptr(), host.nbytes());
    out.emplace_back(p.key(), torch::full({}, static_cast<std::int64_t>(sum), torch::kLong));
  }
  return out;
}

std::string base_source(const config::ModelConfig& config) {
  const std::string loaded = config.init_from.empty() ? "" : config.init_from;
  if (config.name == config::ModelName::kTorchscript) {
    return "model.path=" + config.path + (loaded.empty() ? "" : " and model.init_from=" + loaded);
  }
  return loaded.empty() ? "random weights from train.seed" : loaded;
}

void check_base(const ckpt::CheckpointReader& reader, model::Model& model, const std::string& source) {
  if (!model::has_adapters(model)) return;
  std::map<std::string, std::int64_t> stored;
  for (const auto& [name, value] : reader.read_group(ckpt::group::kBase)) {
    stored[name] = ckpt::stored_count(value, std::string(ckpt::group::kBase) + "/" + name);
  }
  const std::string fix = "; adapters apply only to the base they were trained on: use the base the checkpoint's "
                          "config names (model.init_from, model.path) or start fresh";
  for (const auto& [name, checksum] : base_checksums(model)) {
    const auto found = stored.find(name);
    if (found == stored.end()) {
      throw ConfigError(reader.path() + " holds no checksum of base weight '" + name + "' (" + source +
                        "): the checkpoint was written for another model" + fix);
    }
    if (found->second != checksum.item<std::int64_t>()) {
      throw ConfigError("base weight '" + name + "' (" + source + ") is not the one the adapters of " + reader.path() +
                        " were trained on" + fix);
    }
  }
}

void read_checkpoint_weights(const ckpt::CheckpointReader& reader, model::Model& model,
                             const config::ModelConfig& config, Weights which) {
  if (model::has_adapters(model) && !config.init_from.empty()) {
    const weights::WeightFile file = weights::WeightFile::open(config.init_from);
    weights::load_weights(model, weights::map_weights(config, file), config.init_strict, config.init_from);
  }
  check_base(reader, model, base_source(config));
  reader.read_into(ckpt::group::kModel, model_state(model));
  if (which == Weights::kTrained || !reader.has_group(ckpt::group::kEma)) return;
  reader.read_into(ckpt::group::kEma, averaged_parameters(model));
  log::info("using the moving average of the weights that {} holds (train.ema_decay; its ema group)", reader.path());
}

}  // namespace hpctrain::weights
