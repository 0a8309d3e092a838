#include <functional>

#include "builtin_models.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/lora.h"

namespace hpctrain::model {
namespace {

using Factory = std::function<std::shared_ptr<Model>(const config::ModelConfig&, const ModelSpec&)>;

// The factory of each config::ModelName.
Factory factory(config::ModelName name) {
  switch (name) {
    case config::ModelName::kFashionCnn: return make_fashion_cnn;
    case config::ModelName::kMlp: return make_mlp;
    case config::ModelName::kResnet: return make_resnet;
    case config::ModelName::kGpt: return make_gpt;
    case config::ModelName::kLlama: return make_llama;
    case config::ModelName::kUnet: return make_unet;
    case config::ModelName::kTorchscript: return make_torchscript;
  }
  throw Error("internal: model.name holds no model's value");
}

}  // namespace

std::shared_ptr<Model> make_model(const config::ModelConfig& config, const ModelSpec& spec) {
  if (spec.num_classes < 2) {
    throw ConfigError(std::string("model ") + config::name_of(config.name) + ": the dataset declares " +
                      std::to_string(spec.num_classes) + " classes; a classifier needs at least 2");
  }
  const bool has_blocks = config.name == config::ModelName::kGpt || config.name == config::ModelName::kLlama;
  if (config.activation_checkpointing && !has_blocks) {
    throw ConfigError(std::string("model.activation_checkpointing recomputes a gpt's or llama's blocks; model.name=") +
                      config::name_of(config.name) + " has none to recompute: set it to false");
  }
  std::shared_ptr<Model> model = factory(config.name)(config, spec);
  add_lora_adapters(*model, config);
  return model;
}

}  // namespace hpctrain::model
