#include "hpctrain/model/model.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ATen.h>

#include <cmath>

#include "hpctrain/config/option_table.h"
#include "hpctrain/model/batch_norm.h"
#include "hpctrain/core/error.h"

namespace hpctrain::model {
namespace {

config::ModelConfig model_config(const std::string& name) {
  config::ModelConfig c;
  EXPECT_TRUE(config::parse_choice(name, c.name)) << name;
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

config::ModelConfig small_gpt() {
  config::ModelConfig c = model_config("gpt");
  c.gpt_layers = 2;
  c.gpt_heads = 2;
  c.gpt_embd = 32;
  c.gpt_block_size = 16;
  c.dropout = 0.0;
  return c;
}

TEST(Models, GptHasGpt2NamesTiedWeightsAndTheExpectedSize) {
  auto net = make_model(small_gpt(), {{16}, 256});
  // wte 256x32 + wpe 16x32 + 2 blocks x (2 LayerNorms 128 + c_attn 3168 + c_proj 1056 + c_fc
  // 4224 + c_proj 4128) + ln_f 64; no separate output layer: it is wte.
  EXPECT_EQ(parameter_count(*net), 8192 + 512 + 2 * 12704 + 64);
  const auto named = net->module().named_parameters();
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.0.ln_1.weight",
                           "transformer.h.1.attn.c_attn.weight", "transformer.h.1.mlp.c_proj.bias",
                           "transformer.ln_f.bias"}) {
    EXPECT_NE(named.find(name), nullptr) << name;
  }
  const at::Tensor logits = net->forward(at::randint(0, 256, {3, 16}, at::kLong));
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{3, 16, 256}));
  EXPECT_EQ(net->forward(at::randint(0, 256, {2, 5}, at::kLong)).sizes(), (std::vector<std::int64_t>{2, 5, 256}));
}

TEST(Models, GptLogitsAtAPlaceDoNotSeeLaterTokens) {
  torch::manual_seed(5);
  auto net = make_model(small_gpt(), {{16}, 256});
  net->module().eval();
  const at::Tensor tokens = at::randint(0, 256, {1, 16}, at::kLong);
  at::Tensor changed = tokens.clone();
  changed[0][9] = (tokens[0][9].item<std::int64_t>() + 1) % 256;
  const at::Tensor a = net->forward(tokens);
  const at::Tensor b = net->forward(changed);
  EXPECT_TRUE(at::allclose(a.narrow(1, 0, 9), b.narrow(1, 0, 9)));
  EXPECT_FALSE(at::allclose(a.narrow(1, 9, 7), b.narrow(1, 9, 7)));
}

TEST(Models, GptLearnsToContinueASequence) {
  torch::manual_seed(7);
  auto net = make_model(small_gpt(), {{16}, 256});
  // Windows of a repeating sequence: input tokens 0..15 of a window, target the next token.
  const at::Tensor stream = at::arange(40, at::kLong).remainder(11).mul(7);
  const at::Tensor x = torch::stack({stream.narrow(0, 0, 16), stream.narrow(0, 5, 16)});
  const at::Tensor y = torch::stack({stream.narrow(0, 1, 16), stream.narrow(0, 6, 16)});
  torch::optim::Adam optimizer(net->module().parameters(), torch::optim::AdamOptions(0.003));
  double first = 0;
  double last = 0;
  for (int step = 0; step < 40; ++step) {
    optimizer.zero_grad();
    const at::Tensor loss = torch::nn::functional::cross_entropy(net->forward(x).flatten(0, 1), y.flatten());
    loss.backward();
    optimizer.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(256.0), 0.3);  // a fresh model guesses uniformly
  EXPECT_LT(last, first * 0.5) << first << " -> " << last;
}

TEST(Models, GptRefusesSampleDataAndHeadsThatDoNotDivideTheWidth) {
  EXPECT_THROW(make_model(small_gpt(), {{1, 28, 28}, 10}), ConfigError);
  EXPECT_THROW(make_model(small_gpt(), {{32}, 256}), ConfigError);  // not gpt_block_size
  config::ModelConfig odd = small_gpt();
  odd.gpt_heads = 3;
  EXPECT_THROW(make_model(odd, {{16}, 256}), ConfigError);
}

// model.name is a choice: a name that is not one is refused by the option table, and every one
// the table offers builds (torchscript from a file: tests/e2e/torchscript_e2e_test.cpp).
TEST(Models, EveryBuiltInChoiceOfTheOptionTableBuilds) {
  const config::Option* option = config::find_option("model.name");
  ASSERT_NE(option, nullptr);
  EXPECT_EQ(option->allowed, "fashion_cnn|mlp|resnet|gpt|llama|unet|torchscript");  // llama: llama_test.cpp
  config::Config config;
  EXPECT_THROW(option->assign(config, "resnet9000"), ConfigError);
  for (const char* name : {"fashion_cnn", "mlp", "resnet", "unet"}) {
    EXPECT_NE(make_model(model_config(name), {{1, 28, 28}, 10}), nullptr) << name;
  }
  config::ModelConfig gpt = model_config("gpt");
  gpt.gpt_block_size = 16;
  EXPECT_NE(make_model(gpt, {{16}, 256, true}), nullptr);
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
