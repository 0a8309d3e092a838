// Factories of the models, one .cpp each; registry.cpp lists them. Private to src/model.
#pragma once

#include <memory>

#include "hpctrain/model/model.h"

namespace hpctrain::model {

std::shared_ptr<Model> make_fashion_cnn(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_mlp(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_resnet(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_unet(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_gpt(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_llama(const config::ModelConfig& config, const ModelSpec& spec);
std::shared_ptr<Model> make_torchscript(const config::ModelConfig& config, const ModelSpec& spec);

}  // namespace hpctrain::model
