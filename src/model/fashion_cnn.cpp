// fashion_cnn: two conv blocks and a two-layer head, for 1x28x28 inputs.
//   Conv(1->32, 3x3, pad 1) + BatchNorm (model::BatchNorm: dist.sync_bn) + ReLU + MaxPool 2
//   Conv(32->64, 3x3, pad 1) + BatchNorm + ReLU + MaxPool 2
//   flatten (64*7*7 = 3136) -> Linear(3136->128) + ReLU + Dropout(model.dropout) -> Linear(128->C)
#include <torch/torch.h>

#include "batch_norm_layer.h"
#include "builtin_models.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

class FashionCnn final : public nn::Module, public Model {
 public:
  FashionCnn(double dropout, std::int64_t num_classes)
      : conv1_(register_module("conv1", nn::Conv2d(nn::Conv2dOptions(1, 32, 3).padding(1)))),
        bn1_(register_module("bn1", BatchNorm(32))),
        conv2_(register_module("conv2", nn::Conv2d(nn::Conv2dOptions(32, 64, 3).padding(1)))),
        bn2_(register_module("bn2", BatchNorm(64))),
        fc1_(register_module("fc1", nn::Linear(64 * 7 * 7, 128))),
        dropout_(register_module("dropout", nn::Dropout(dropout))),
        fc2_(register_module("fc2", nn::Linear(128, num_classes))) {}

  at::Tensor forward(const at::Tensor& input) override {
    begin_forward();
    at::Tensor x = run_block(0, [&] { return conv1_(input); });
    x = torch::max_pool2d(torch::relu(run_block(1, [&] { return bn1_(x); })), 2);
    x = run_block(2, [&] { return conv2_(x); });
    x = torch::max_pool2d(torch::relu(run_block(3, [&] { return bn2_(x); })), 2);
    x = dropout_(torch::relu(run_block(4, [&] { return fc1_(x.flatten(1)); })));
    return end_forward(run_block(5, [&] { return fc2_(x); }));
  }

  nn::Module& module() override { return *this; }
  // Every layer with parameters, in order.
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    return {conv1_.ptr(), bn1_.ptr(), conv2_.ptr(), bn2_.ptr(), fc1_.ptr(), fc2_.ptr()};
  }

 private:
  nn::Conv2d conv1_;
  BatchNorm bn1_;
  nn::Conv2d conv2_;
  BatchNorm bn2_;
  nn::Linear fc1_;
  nn::Dropout dropout_;
  nn::Linear fc2_;
};

}  // namespace

std::shared_ptr<Model> make_fashion_cnn(const config::ModelConfig& config, const ModelSpec& spec) {
  if (spec.input_shape != std::vector<std::int64_t>{1, 28, 28}) {
    throw ConfigError("model.name=fashion_cnn needs 1x28x28 inputs, but the dataset's samples are " +
                      c10::str(c10::IntArrayRef(spec.input_shape)) + "; use model.name=mlp");
  }
  return std::make_shared<FashionCnn>(config.dropout, spec.num_classes);
}

}  // namespace hpctrain::model
