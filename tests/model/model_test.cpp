#include "hpctrain/model/model.h"

#include <gtest/gtest.h>
#include <torch/nn/module.h>

#include <ATen/ATen.h>

#include "hpctrain/config/option_table.h"
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

TEST(Models, UnknownNameListsTheKnownOnes) {
  try {
    make_model(model_config("resnet9000"), {{1, 28, 28}, 10});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fashion_cnn|mlp"), std::string::npos) << e.what();
  }
}

TEST(Models, RegistryAndOptionTableAgree) {
  const config::Option* option = config::find_option("model.name");
  ASSERT_NE(option, nullptr);
  std::string joined;
  for (const auto& name : model_names()) joined += (joined.empty() ? "" : "|") + name;
  EXPECT_EQ(option->allowed, joined);
}

}  // namespace
}  // namespace hpctrain::model
