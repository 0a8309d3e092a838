#include "hpctrain/model/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ATen.h>

#include "hpctrain/config/option_table.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

config::ModelConfig model_config(const std::string& name) {
  config::ModelConfig c;
  c.name = name;
  c.mlp_hidden = "64,32";
  c.dropout = 0.25;
  return c;
}

std::int64_t parameter_count(Model& m) {
  std::int64_t n = 0;
  for (const auto& p : m.module().parameters()) n += p.numel();
  return n;
}

TEST(Models, FashionCnnHasTheSpecifiedShapeAndSize) {
  auto net = make_model(model_config("fashion_cnn"), {{1, 28, 28}, 10});
  const at::Tensor logits = net->forward(at::randn({5, 1, 28, 28}));
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{5, 10}));
  // conv1 320 + bn1 64 + conv2 18496 + bn2 128 + fc1 3136*128+128 + fc2 1290
  EXPECT_EQ(parameter_count(*net), 320 + 64 + 18496 + 128 + 401536 + 1290);
  EXPECT_EQ(net->module().buffers().size(), 6u);  // running mean/var/count of two BatchNorms
}

TEST(Models, FashionCnnRejectsOtherInputShapes) {
  try {
    make_model(model_config("fashion_cnn"), {{3, 32, 32}, 10});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("1x28x28"), std::string::npos) << e.what();
  }
}

TEST(Models, MlpFollowsHiddenWidths) {
  auto net = make_model(model_config("mlp"), {{1, 8, 8}, 3});
  EXPECT_EQ(net->forward(at::randn({4, 1, 8, 8})).sizes(), (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(parameter_count(*net), (64 * 64 + 64) + (64 * 32 + 32) + (32 * 3 + 3));
}

TEST(Models, ResNetTwentyHasTheCifarShapeAndSize) {
  config::ModelConfig c = model_config("resnet");
  auto cifar = make_model(c, {{3, 32, 32}, 10});
  EXPECT_EQ(cifar->forward(at::randn({2, 3, 32, 32})).sizes(), (std::vector<std::int64_t>{2, 10}));
  // He et al.: 0.27 M. Stem 432 + bn 32; stage 1: 3 x (2 x 2304 + 2 x 32); stage 2: 4608 + 9216 +
  // 2 x 64 + shortcut 512 + 64, then 2 x (2 x 9216 + 2 x 64); stage 3 likewise at 64 channels; fc 650.
  EXPECT_EQ(parameter_count(*cifar), 272474);
  auto fashion = make_model(c, {{1, 28, 28}, 10});
  EXPECT_EQ(fashion->forward(at::randn({2, 1, 28, 28})).sizes(), (std::vector<std::int64_t>{2, 10}));
  c.resnet_depth = 21;
  try {
    make_model(c, {{3, 32, 32}, 10});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("not 6n+2"), std::string::npos) << e.what();
  }
}

TEST(Models, ResNetLearnsASmallBatch) {
  torch::manual_seed(3);
  auto net = make_model(model_config("resnet"), {{1, 12, 12}, 3});
  const at::Tensor x = at::randn({12, 1, 12, 12});
  const at::Tensor y = at::arange(12, at::kLong).remainder(3);
  torch::optim::Adam optimizer(net->module().parameters(), torch::optim::AdamOptions(0.01));
  double first = 0;
  double last = 0;
  for (int step = 0; step < 30; ++step) {
    optimizer.zero_grad();
    const at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x), y);
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, first * 0.5) << first << " -> " << last;
}

TEST(Models, UnknownNameListsTheKnownOnes) {
  try {
    make_model(model_config("resnet9000"), {{1, 28, 28}, 10});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fashion_cnn|mlp|resnet"), std::string::npos) << e.what();
  }
}

TEST(Models, RegistryAndOptionTableAgree) {
  const config::Option* option = config::find_option("model.name");
  ASSERT_NE(option, nullptr);
  std::string joined;
  for (const auto& name : model_names()) joined += (joined.empty() ? "" : "|") + name;
  EXPECT_EQ(option->allowed, joined);
}

// Forward, backward and running statistics of fashion_cnn with its BatchNorm layers on the
// synchronized path (a reducer; one rank, so summing is the identity) against torch's batch norm.
TEST(SyncBatchNorm, OneRankEqualsTorchBatchNormInValueGradientAndRunningStatistics) {
  config::ModelConfig c = model_config("fashion_cnn");
  c.dropout = 0.0;
  at::manual_seed(3);
  auto plain = make_model(c, {{1, 28, 28}, 10});
  at::manual_seed(3);
  auto synced = make_model(c, {{1, 28, 28}, 10});
  int reductions = 0;
  EXPECT_EQ(set_batch_stats_reducer(synced->module(), [&](at::Tensor& stats) {
              EXPECT_EQ(stats.scalar_type(), at::kDouble);
              ++reductions;
            }),
            2);
  const at::Tensor input = at::randn({6, 1, 28, 28}) * 3 + 1;
  const at::Tensor target = at::randint(0, 10, {6}, at::kLong);
  for (auto* net : {plain.get(), synced.get()}) {
    net->module().train();
    at::cross_entropy_loss(net->forward(input), target).backward();
  }
  EXPECT_EQ(reductions, 4) << "each layer reduces once in forward and once in backward";
  const auto expected = plain->module().named_parameters();
  for (const auto& p : synced->module().named_parameters()) {
    EXPECT_TRUE(at::allclose(p.value(), expected[p.key()])) << p.key();
    EXPECT_TRUE(at::allclose(p.value().grad(), expected[p.key()].grad(), 1e-4, 1e-6)) << p.key() << " gradient";
  }
  const auto expected_buffers = plain->module().named_buffers();
  for (const auto& b : synced->module().named_buffers()) {
    EXPECT_TRUE(at::allclose(b.value(), expected_buffers[b.key()], 1e-5, 1e-6)) << b.key();
  }
  // Evaluation uses the running statistics, with or without a reducer.
  plain->module().eval();
  synced->module().eval();
  EXPECT_TRUE(at::allclose(plain->forward(input), synced->forward(input), 1e-5, 1e-5));
  EXPECT_EQ(reductions, 4);
}

}  // namespace
}  // namespace hpctrain::model
