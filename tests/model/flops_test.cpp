#include "hpctrain/model/flops.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "hpctrain/model/model.h"

namespace hpctrain::model {
namespace {

TEST(Flops, MatrixProductsCountTwoPerMultiplyAdd) {
  const at::Tensor a = at::randn({3, 4});
  const at::Tensor b = at::randn({4, 5});
  EXPECT_EQ(count_flops([&] { at::mm(a, b); }), 2 * 3 * 4 * 5);
  EXPECT_EQ(count_flops([&] { at::addmm(at::zeros({3, 5}), a, b); }), 2 * 3 * 4 * 5);
  const at::Tensor x = at::randn({2, 3, 4});
  const at::Tensor y = at::randn({2, 4, 5});
  EXPECT_EQ(count_flops([&] { at::bmm(x, y); }), 2 * 2 * 3 * 4 * 5);
  EXPECT_EQ(count_flops([&] { at::baddbmm(at::zeros({2, 3, 5}), x, y); }), 2 * 2 * 3 * 4 * 5);
}

TEST(Flops, AProductInsideAnotherOpCountsOnce) {
  const at::Tensor x = at::randn({2, 3, 4});
  // matmul folds [2, 3, 4] @ [4, 5] into one mm; linear on 3-D input likewise.
  EXPECT_EQ(count_flops([&] { at::matmul(x, at::randn({4, 5})); }), 2 * 2 * 3 * 4 * 5);
  torch::nn::Linear linear(4, 5);
  EXPECT_EQ(count_flops([&] { linear(x); }), 2 * 2 * 3 * 4 * 5);
  // Four-dimensional products (attention's) become bmm.
  EXPECT_EQ(count_flops([&] { at::matmul(at::randn({2, 3, 6, 4}), at::randn({2, 3, 4, 6})); }),
            2 * 2 * 3 * 6 * 4 * 6);
}

TEST(Flops, ConvolutionsCountEachOutputsMultiplyAdds) {
  // 2 images, 3 -> 8 channels, 3x3, stride 2, padding 1: 10x10 -> 5x5 outputs of 27 multiply-adds.
  torch::nn::Conv2d strided(torch::nn::Conv2dOptions(3, 8, 3).stride(2).padding(1));
  EXPECT_EQ(count_flops([&] { strided(at::randn({2, 3, 10, 10})); }), 2.0 * 2 * 8 * 5 * 5 * 27);
  // Two groups of 2 -> 3 channels: each output sees 2 input channels.
  torch::nn::Conv2d grouped(torch::nn::Conv2dOptions(4, 6, 3).padding(1).groups(2));
  EXPECT_EQ(count_flops([&] { grouped(at::randn({1, 4, 6, 6})); }), 2.0 * 6 * 6 * 6 * (2 * 9));
  // 1-D, dilation 2: 20 - 2 * (3 - 1) = 16 outputs per channel.
  torch::nn::Conv1d dilated(torch::nn::Conv1dOptions(2, 3, 3).dilation(2));
  EXPECT_EQ(count_flops([&] { dilated(at::randn({1, 2, 20})); }), 2.0 * 3 * 16 * (2 * 3));
  // Transposed, 4 -> 3 channels, 2x2: each of the 100 input elements feeds 3 x 4 outputs.
  torch::nn::ConvTranspose2d up(torch::nn::ConvTranspose2dOptions(4, 3, 2).stride(2));
  EXPECT_EQ(count_flops([&] { up(at::randn({1, 4, 5, 5})); }), 2.0 * 100 * 12);
}

TEST(Flops, FusedOpsCountTheirProducts) {
  const at::Tensor a = at::randn({3, 4});
  const at::Tensor b = at::randn({4, 5});
  EXPECT_EQ(count_flops([&] { at::_addmm_activation(at::zeros({3, 5}), a, b); }), 2 * 3 * 4 * 5);
  // Attention over 2 x 3 heads, 6 queries, 5 keys, 4-wide: scores 6 x 5 x 4 and the weighted sum
  // 6 x 4 x 5 multiply-adds per head; the math kernel's own products are not counted again.
  const at::Tensor q = at::randn({2, 3, 6, 4});
  const at::Tensor k = at::randn({2, 3, 5, 4});
  const at::Tensor v = at::randn({2, 3, 5, 4});
  EXPECT_EQ(count_flops([&] { at::_scaled_dot_product_attention_math(q, k, v); }), 2.0 * 2 * 3 * 6 * 5 * (4 + 4));
}

TEST(Flops, ElementwiseWorkIsNotCounted) {
  const at::Tensor x = at::randn({64, 64});
  EXPECT_EQ(count_flops([&] { at::relu(x.add(1).mul(x)).softmax(-1); }), 0);
}

TEST(Flops, AnExceptionLeavesNoCounterBehind) {
  EXPECT_THROW(count_flops([] { throw std::runtime_error("forward failed"); }), std::runtime_error);
  const at::Tensor a = at::randn({2, 2});
  EXPECT_EQ(count_flops([&] { at::mm(a, a); }), 16);
}

config::ModelConfig config_of(const std::string& name) {
  config::ModelConfig c;
  EXPECT_TRUE(config::parse_choice(name, c.name)) << name;
  c.mlp_hidden = "64,32";
  c.dropout = 0.5;
  return c;
}

// A model's forward FLOPs per sample: one forward of a batch, counted, over its rows.
double per_sample(Model& model, const at::Tensor& input) {
  return count_flops([&] { model.forward(input); }) / static_cast<double>(input.size(0));
}

TEST(Flops, FashionCnnPerSampleMatchesItsLayers) {
  auto net = make_model(config_of("fashion_cnn"), {{1, 28, 28}, 10});
  // conv1 28x28x32 outputs of 9 multiply-adds, conv2 14x14x64 of 288, fc1 3136x128, fc2 128x10.
  const double expected = 2.0 * (28 * 28 * 32 * 9 + 14 * 14 * 64 * 288 + 3136 * 128 + 128 * 10);
  EXPECT_EQ(per_sample(*net, at::zeros({3, 1, 28, 28})), expected);
  EXPECT_EQ(training_flops_per_sample(expected), 3 * expected);
}

TEST(Flops, MlpPerSampleIsTwiceItsWeights) {
  auto net = make_model(config_of("mlp"), {{1, 8, 8}, 3});
  EXPECT_EQ(per_sample(*net, at::zeros({4, 1, 8, 8})), 2.0 * (64 * 64 + 64 * 32 + 32 * 3));
}

TEST(Flops, GptPerWindowFollowsTheTransformerFormula) {
  config::ModelConfig c = config_of("gpt");
  c.gpt_layers = 2;
  c.gpt_heads = 2;
  c.gpt_embd = 32;
  c.gpt_block_size = 16;
  const double layers = 2, d = 32, t = 16, vocab = 256;
  auto net = make_model(c, {{16}, 256});
  // Per layer: the projections (qkv 3d^2, out d^2, MLP 8d^2 per token) and attention (scores and
  // the weighted sum, T^2 d each); then the tied output layer (d x vocab per token).
  const double expected = layers * (2 * 12 * t * d * d + 2 * 2 * t * t * d) + 2 * t * d * vocab;
  EXPECT_EQ(per_sample(*net, at::zeros({2, 16}, at::kLong)), expected);
}

}  // namespace
}  // namespace hpctrain::model
