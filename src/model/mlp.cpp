// mlp: flatten -> [Linear(h_i) + ReLU + Dropout] for each width in model.mlp_hidden -> Linear(C).
#include <torch/torch.h>

#include <sstream>

#include "builtin_models.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

std::vector<std::int64_t> parse_widths(const std::string& text) {
  std::vector<std::int64_t> widths;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) widths.push_back(std::stoll(item));
  return widths;  // validated by the option table
}

class Mlp final : public nn::Module, public Model {
 public:
  Mlp(std::int64_t inputs, const std::vector<std::int64_t>& hidden, double dropout,
      std::int64_t num_classes)
      : layers_(register_module("layers", nn::Sequential())) {
    std::int64_t width = inputs;
    for (const std::int64_t h : hidden) {
      layers_->push_back(nn::Linear(width, h));
      layers_->push_back(nn::ReLU());
      if (dropout > 0) layers_->push_back(nn::Dropout(dropout));
      width = h;
    }
    layers_->push_back(nn::Linear(width, num_classes));
  }

  // Each Linear runs as a block (model.h): the ReLUs and Dropouts have no parameters.
  at::Tensor forward(const at::Tensor& input) override {
    begin_forward();
    at::Tensor x = input.flatten(1);
    size_t block = 0;
    for (auto& layer : *layers_) {
      if (layer.ptr()->as<nn::Linear>() == nullptr) {
        x = layer.forward(x);
      } else {
        x = run_block(block++, [&] { return layer.forward(x); });
      }
    }
    return end_forward(x);
  }

  nn::Module& module() override { return *this; }
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    std::vector<std::shared_ptr<nn::Module>> out;
    for (const auto& layer : layers_->children()) {
      if (layer->as<nn::Linear>() != nullptr) out.push_back(layer);
    }
    return out;
  }

 private:
  nn::Sequential layers_;
};

}  // namespace

std::shared_ptr<Model> make_mlp(const config::ModelConfig& config, const ModelSpec& spec) {
  std::int64_t inputs = 1;
  for (const std::int64_t d : spec.input_shape) inputs *= d;
  return std::make_shared<Mlp>(inputs, parse_widths(config.mlp_hidden), config.dropout,
                               spec.num_classes);
}

}  // namespace hpctrain::model
