#include <functional>

#include "builtin_models.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

using Factory = std::function<std::shared_ptr<Model>(const config::ModelConfig&, const ModelSpec&)>;

struct Entry {
  const char* name;
  Factory make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries{
      {"fashion_cnn", make_fashion_cnn},
      {"mlp", make_mlp},
      {"resnet", make_resnet},
      {"gpt", make_gpt},
      {"torchscript", make_torchscript},
  };
  return entries;
}

}  // namespace

std::shared_ptr<Model> make_model(const config::ModelConfig& config, const ModelSpec& spec) {
  if (spec.num_classes < 2) {
    throw ConfigError("model " + config.name + ": the dataset declares " +
                      std::to_string(spec.num_classes) + " classes; a classifier needs at least 2");
  }
  for (const auto& entry : registry()) {
    if (config.name == entry.name) return entry.make(config, spec);
  }
  std::string known;
  for (const auto& name : model_names()) known += (known.empty() ? "" : "|") + name;
  throw ConfigError("model.name: unknown model '" + config.name + "' (allowed: " + known + ")");
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& entry : registry()) names.emplace_back(entry.name);
  return names;
}

}  // namespace hpctrain::model
