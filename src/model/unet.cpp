// unet: a small U-Net that predicts the noise in noisy images (train.objective=diffusion,
// docs/diffusion.md), DDPM's (Ho et al. 2020) at a CPU's size. With ch = model.unet_channels and
// one level per entry m_i of model.unet_mults (width ch * m_i):
//   time_in, time_out: sinusoidal(t, ch) -> Linear(ch -> 4ch) -> SiLU -> Linear(4ch -> 4ch) = emb
//   class_embed (model.unet_class_cond): Embedding(classes + 1, 4ch) added to emb; row `classes`
//     is "no class", which classifier-free guidance trains and samples with
//   conv_in: Conv 3x3 (C -> ch)
//   down.i: res (ResBlock), attn (lowest level, model.unet_attention), resample (Conv 3x3 stride 2;
//     not on the last level); res's output is level i's skip
//   mid: res1, attn, res2
//   up.i (deepest first): res over [h, skip_i], attn (lowest level), resample (nearest x2 + Conv
//     3x3; not on level 0)
//   norm_out, conv_out: GroupNorm + SiLU + Conv 3x3 (ch -> C)
// ResBlock(in -> out): GroupNorm, SiLU, Conv 3x3, + emb_proj(SiLU(emb)), GroupNorm, SiLU, Dropout,
// Conv 3x3; a 1x1 conv on the shortcut when in != out. GroupNorms have 8 groups.
#include <torch/torch.h>

#include <cmath>
#include <sstream>

#include "builtin_models.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

namespace nn = torch::nn;

constexpr std::int64_t kNormGroups = 8;

nn::Conv2d unet_conv(std::int64_t in, std::int64_t out, std::int64_t kernel = 3, std::int64_t stride = 1) {
  return nn::Conv2d(nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2));
}

nn::GroupNorm unet_norm(std::int64_t channels) { return nn::GroupNorm(nn::GroupNormOptions(kNormGroups, channels)); }

// [B] steps -> [B, dim]: sin and cos of t at dim/2 frequencies from 1 to 1/10000 (the Transformer's).
at::Tensor sinusoidal_embedding(const at::Tensor& steps, std::int64_t dim) {
  const std::int64_t half = dim / 2;
  const at::Tensor exponents = torch::arange(half, torch::dtype(torch::kFloat).device(steps.device())) / half;
  const at::Tensor frequencies = torch::exp(exponents * -std::log(10000.0));
  const at::Tensor angles = steps.to(torch::kFloat).unsqueeze(1) * frequencies.unsqueeze(0);
  return torch::cat({torch::sin(angles), torch::cos(angles)}, 1);
}

class UnetResBlockImpl : public nn::Module {
 public:
  UnetResBlockImpl(std::int64_t in, std::int64_t out, std::int64_t emb, double dropout)
      : norm1_(register_module("norm1", unet_norm(in))),
        conv1_(register_module("conv1", unet_conv(in, out))),
        emb_proj_(register_module("emb_proj", nn::Linear(emb, out))),
        norm2_(register_module("norm2", unet_norm(out))),
        dropout_(register_module("dropout", nn::Dropout(dropout))),
        conv2_(register_module("conv2", unet_conv(out, out))) {
    if (in != out) shortcut_ = register_module("shortcut", unet_conv(in, out, 1));
  }

  at::Tensor forward(const at::Tensor& x, const at::Tensor& emb) {
    at::Tensor h = conv1_(torch::silu(norm1_(x)));
    h = h + emb_proj_(torch::silu(emb)).unsqueeze(-1).unsqueeze(-1);
    h = conv2_(dropout_(torch::silu(norm2_(h))));
    return h + (shortcut_.is_empty() ? x : shortcut_(x));
  }

 private:
  nn::GroupNorm norm1_;
  nn::Conv2d conv1_;
  nn::Linear emb_proj_;
  nn::GroupNorm norm2_;
  nn::Dropout dropout_;
  nn::Conv2d conv2_;
  nn::Conv2d shortcut_{nullptr};
};
TORCH_MODULE(UnetResBlock);

// One head of self-attention over the pixels, with a residual connection.
class UnetAttentionImpl : public nn::Module {
 public:
  explicit UnetAttentionImpl(std::int64_t channels)
      : norm_(register_module("norm", unet_norm(channels))),
        qkv_(register_module("qkv", unet_conv(channels, 3 * channels, 1))),
        proj_(register_module("proj", unet_conv(channels, channels, 1))) {}

  at::Tensor forward(const at::Tensor& x) {
    const std::int64_t batch = x.size(0);
    const std::int64_t channels = x.size(1);
    const at::Tensor qkv = qkv_(norm_(x)).reshape({batch, 3, channels, -1});
    const at::Tensor q = qkv.select(1, 0);
    const at::Tensor k = qkv.select(1, 1);
    const at::Tensor v = qkv.select(1, 2);
    // weights[b, i, j]: how much pixel i attends to pixel j.
    const at::Tensor weights = torch::softmax(torch::bmm(q.transpose(1, 2), k) / std::sqrt(static_cast<double>(channels)), -1);
    const at::Tensor attended = torch::bmm(v, weights.transpose(1, 2)).reshape(x.sizes());
    return x + proj_(attended);
  }

 private:
  nn::GroupNorm norm_;
  nn::Conv2d qkv_;
  nn::Conv2d proj_;
};
TORCH_MODULE(UnetAttention);

// One resolution of the down or up path.
class UnetLevelImpl : public nn::Module {
 public:
  enum class Resample { kNone, kDown, kUp };

  UnetLevelImpl(std::int64_t in, std::int64_t out, std::int64_t emb, double dropout, bool attention, Resample resample)
      : res_(register_module("res", UnetResBlock(in, out, emb, dropout))), resample_kind_(resample) {
    if (attention) attn_ = register_module("attn", UnetAttention(out));
    if (resample != Resample::kNone) {
      resample_ = register_module("resample", unet_conv(out, out, 3, resample == Resample::kDown ? 2 : 1));
    }
  }

  // The level's features (before resampling) and its output (after).
  std::pair<at::Tensor, at::Tensor> forward(const at::Tensor& x, const at::Tensor& emb) {
    at::Tensor features = res_(x, emb);
    if (!attn_.is_empty()) features = attn_(features);
    if (resample_kind_ == Resample::kNone) return {features, features};
    if (resample_kind_ == Resample::kDown) return {features, resample_(features)};
    const std::vector<double> twice{2.0, 2.0};
    const at::Tensor larger = torch::nn::functional::interpolate(
        features, torch::nn::functional::InterpolateFuncOptions().scale_factor(twice).mode(torch::kNearest));
    return {features, resample_(larger)};
  }

 private:
  UnetResBlock res_;
  UnetAttention attn_{nullptr};
  nn::Conv2d resample_{nullptr};
  Resample resample_kind_;
};
TORCH_MODULE(UnetLevel);

struct UnetShape {
  std::int64_t image_channels = 1;
  std::int64_t channels = 32;
  std::vector<std::int64_t> mults;
  std::int64_t classes = 0;  // 0: unconditional
  bool attention = false;
  double dropout = 0.0;
};

class Unet final : public nn::Module, public Model {
 public:
  explicit Unet(const UnetShape& shape)
      : channels_(shape.channels),
        classes_(shape.classes),
        time_in_(register_module("time_in", nn::Linear(shape.channels, 4 * shape.channels))),
        time_out_(register_module("time_out", nn::Linear(4 * shape.channels, 4 * shape.channels))) {
    // Registered in the order the PyTorch twin declares them (tests/support/unet_reference.py).
    const std::int64_t emb = 4 * shape.channels;
    if (classes_ > 0) class_embed_ = register_module("class_embed", nn::Embedding(classes_ + 1, emb));
    conv_in_ = register_module("conv_in", unet_conv(shape.image_channels, shape.channels));
    down_ = register_module("down", nn::ModuleList());
    const auto levels = static_cast<std::int64_t>(shape.mults.size());
    std::vector<std::int64_t> widths;
    for (const std::int64_t m : shape.mults) widths.push_back(shape.channels * m);
    std::int64_t previous = shape.channels;
    for (std::int64_t i = 0; i < levels; ++i) {
      const bool lowest = i + 1 == levels;
      down_->push_back(UnetLevel(previous, widths[i], emb, shape.dropout, lowest && shape.attention,
                                 lowest ? UnetLevelImpl::Resample::kNone : UnetLevelImpl::Resample::kDown));
      previous = widths[i];
    }
    mid_res1_ = register_module("mid_res1", UnetResBlock(previous, previous, emb, shape.dropout));
    if (shape.attention) mid_attn_ = register_module("mid_attn", UnetAttention(previous));
    mid_res2_ = register_module("mid_res2", UnetResBlock(previous, previous, emb, shape.dropout));
    up_ = register_module("up", nn::ModuleList());
    for (std::int64_t i = levels - 1; i >= 0; --i) {  // up.0 is the deepest
      up_->push_back(UnetLevel(previous + widths[i], widths[i], emb, shape.dropout,
                               i + 1 == levels && shape.attention,
                               i == 0 ? UnetLevelImpl::Resample::kNone : UnetLevelImpl::Resample::kUp));
      previous = widths[i];
    }
    norm_out_ = register_module("norm_out", unet_norm(previous));
    conv_out_ = register_module("conv_out", unet_conv(previous, shape.image_channels));
  }

  at::Tensor forward(const at::Tensor& /*input*/) override {
    throw Error("internal: model.name=unet predicts noise (predict_noise), with train.objective=diffusion");
  }

  // The blocks (blocks()) run through run_block; the embeddings, conv_in and the output layers
  // are outside every block. A down level's features (its skip connection) need no hook of their
  // own: their gradient is complete only after its output's, whose hook gathered the level.
  at::Tensor predict_noise(const at::Tensor& noisy, const at::Tensor& steps, const at::Tensor& labels) override {
    begin_forward();
    at::Tensor emb = time_out_(torch::silu(time_in_(sinusoidal_embedding(steps, channels_))));
    if (classes_ > 0) emb = emb + class_embed_(torch::where(labels < 0, torch::full_like(labels, classes_), labels));
    at::Tensor h = conv_in_(noisy);
    std::vector<at::Tensor> skips;
    std::size_t block = 0;
    for (const auto& level : *down_) {
      h = run_block(block++, [&] {
        auto [features, out] = level->as<UnetLevel>()->forward(h, emb);
        skips.push_back(features);
        return out;
      });
    }
    h = run_block(block++, [&] { return mid_res1_(h, emb); });
    if (!mid_attn_.is_empty()) h = run_block(block++, [&] { return mid_attn_(h); });
    h = run_block(block++, [&] { return mid_res2_(h, emb); });
    for (const auto& level : *up_) {
      h = run_block(block++, [&] {
        return level->as<UnetLevel>()->forward(torch::cat({h, skips.back()}, 1), emb).second;
      });
      skips.pop_back();
    }
    return end_forward(conv_out_(torch::silu(norm_out_(h))));
  }

  nn::Module& module() override { return *this; }

  // In the order predict_noise runs them: the down levels, the middle, the up levels.
  std::vector<std::shared_ptr<nn::Module>> blocks() override {
    std::vector<std::shared_ptr<nn::Module>> out;
    for (const auto& level : *down_) out.push_back(level);
    out.push_back(mid_res1_.ptr());
    if (!mid_attn_.is_empty()) out.push_back(mid_attn_.ptr());
    out.push_back(mid_res2_.ptr());
    for (const auto& level : *up_) out.push_back(level);
    return out;
  }

 private:
  std::int64_t channels_;
  std::int64_t classes_;
  nn::Linear time_in_;
  nn::Linear time_out_;
  nn::Embedding class_embed_{nullptr};
  nn::Conv2d conv_in_{nullptr};
  nn::ModuleList down_{nullptr};
  UnetResBlock mid_res1_{nullptr};
  UnetAttention mid_attn_{nullptr};
  UnetResBlock mid_res2_{nullptr};
  nn::ModuleList up_{nullptr};
  nn::GroupNorm norm_out_{nullptr};
  nn::Conv2d conv_out_{nullptr};
};

std::vector<std::int64_t> level_mults(const std::string& text) {
  std::vector<std::int64_t> mults;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) mults.push_back(std::stoll(item));  // the option table checked them
  return mults;
}

}  // namespace

std::shared_ptr<Model> make_unet(const config::ModelConfig& config, const ModelSpec& spec) {
  const std::vector<std::int64_t>& shape = spec.input_shape;
  if (shape.size() != 3) {
    throw ConfigError("model.name=unet needs images stored channels first [C, H, W], but the dataset's samples are " +
                      c10::str(c10::IntArrayRef(shape)));
  }
  UnetShape unet;
  unet.image_channels = shape[0];
  unet.channels = config.unet_channels;
  unet.mults = level_mults(config.unet_mults);
  unet.classes = config.unet_class_cond ? spec.num_classes : 0;
  unet.attention = config.unet_attention;
  unet.dropout = config.dropout;
  if (unet.mults.size() > 6) {
    throw ConfigError("model.unet_mults=" + config.unet_mults + " has " + std::to_string(unet.mults.size()) +
                      " levels; the unet takes at most 6");
  }
  if (unet.channels % kNormGroups != 0) {
    throw ConfigError("model.unet_channels=" + std::to_string(unet.channels) +
                      " must be a multiple of 8 (the unet's GroupNorms have 8 groups)");
  }
  const std::int64_t reduction = std::int64_t{1} << (unet.mults.size() - 1);
  if (shape[1] % reduction != 0 || shape[2] % reduction != 0) {
    throw ConfigError("model.unet_mults=" + config.unet_mults + " has " + std::to_string(unet.mults.size()) +
                      " levels, which halve the resolution " + std::to_string(unet.mults.size() - 1) +
                      " times, but the images are " + std::to_string(shape[1]) + "x" + std::to_string(shape[2]) +
                      ": use fewer levels or images whose sides divide by " + std::to_string(reduction));
  }
  return std::make_shared<Unet>(unet);
}

}  // namespace hpctrain::model
