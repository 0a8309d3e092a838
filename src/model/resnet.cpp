// resnet: the CIFAR-style residual network (He et al. 2016, section 4.2), for small images such as
// 1x28x28 or 3x32x32. Depth 6n+2: a 3x3 stem convolution to `width` channels, then three stages of
// n basic blocks (two 3x3 convolutions with BatchNorm and a shortcut) at width, 2 x width and
// 4 x width channels, the last two starting with stride 2; global average pooling and a linear
// classifier. A stage that changes the shape has a 1x1 convolution + BatchNorm shortcut.
// BatchNorm is model::BatchNorm, so dist.sync_bn applies. resnet20 (n=3, width 16): 0.27 M
// parameters on 3x32x32.
#include <torch/torch.h>

#include "batch_norm_layer.h"
#include "builtin_models.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

nn::Conv2d conv3x3(std::int64_t in, std::int64_t out, std::int64_t stride) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

class BasicBlockImpl : public nn::Module {
 public:
  BasicBlockImpl(std::int64_t in, std::int64_t out, std::int64_t stride)
      : conv1_(register_module("conv1", conv3x3(in, out, stride))),
        bn1_(register_module("bn1", BatchNorm(out))),
        conv2_(register_module("conv2", conv3x3(out, out, 1))),
        bn2_(register_module("bn2", BatchNorm(out))) {
    if (stride != 1 || in != out) {
      shortcut_ = register_module("shortcut", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                                             BatchNorm(out)));
    }
  }

  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor y = bn2_(conv2_(torch::relu(bn1_(conv1_(x)))));
    return torch::relu(y + (shortcut_.is_empty() ? x : shortcut_->forward(x)));
  }

 private:
  nn::Conv2d conv1_;
  BatchNorm bn1_;
  nn::Conv2d conv2_;
  BatchNorm bn2_;
  nn::Sequential shortcut_{nullptr};
};
TORCH_MODULE(BasicBlock);

class ResNet final : public nn::Module, public Model {
 public:
  ResNet(std::int64_t channels, std::int64_t blocks_per_stage, std::int64_t width, std::int64_t num_classes)
      : stem_(register_module("stem", conv3x3(channels, width, 1))),
        bn_(register_module("bn", BatchNorm(width))),
        fc_(register_module("fc", nn::Linear(4 * width, num_classes))) {
    std::int64_t in = width;
    for (int stage = 0; stage < 3; ++stage) {
      const std::int64_t out = width << stage;
      for (std::int64_t b = 0; b < blocks_per_stage; ++b) {
        const std::int64_t stride = stage > 0 && b == 0 ? 2 : 1;
        blocks_->push_back(BasicBlock(in, out, stride));
        in = out;
      }
    }
    register_module("blocks", blocks_);
  }

  at::Tensor forward(const at::Tensor& input) override {
    begin_forward();
    at::Tensor x = run_block(0, [&] { return stem_(input); });
    x = torch::relu(run_block(1, [&] { return bn_(x); }));
    for (size_t b = 0; b < blocks_->size(); ++b) {
      x = run_block(2 + b, [&] { return blocks_->ptr(b)->as<BasicBlock>()->forward(x); });
    }
    const at::Tensor pooled = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
    return end_forward(run_block(2 + blocks_->size(), [&] { return fc_(pooled); }));
  }

  nn::Module& module() override { return *this; }
  // The stem, its BatchNorm, every residual block, the classifier.
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    std::vector<std::shared_ptr<nn::Module>> out{stem_.ptr(), bn_.ptr()};
    for (const auto& block : blocks_->children()) out.push_back(block);
    out.push_back(fc_.ptr());
    return out;
  }

 private:
  nn::Conv2d stem_;
  BatchNorm bn_;
  nn::Sequential blocks_;
  nn::Linear fc_;
};

}  // namespace

std::shared_ptr<Model> make_resnet(const config::ModelConfig& config, const ModelSpec& spec) {
  if (spec.input_shape.size() != 3 || spec.input_shape[1] < 8 || spec.input_shape[2] < 8) {
    throw ConfigError("model.name=resnet needs image samples CxHxW of at least 8x8, but the dataset's samples are " +
                      c10::str(c10::IntArrayRef(spec.input_shape)) + "; use model.name=mlp");
  }
  if (config.resnet_depth < 8 || (config.resnet_depth - 2) % 6 != 0) {
    throw ConfigError("model.resnet_depth=" + std::to_string(config.resnet_depth) +
                      " is not 6n+2 for some n >= 1 (e.g. 20, 32, 44, 56, 110)");
  }
  return std::make_shared<ResNet>(spec.input_shape[0], (config.resnet_depth - 2) / 6, config.resnet_width,
                                  spec.num_classes);
}

}  // namespace hpctrain::model
