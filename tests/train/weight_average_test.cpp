// The moving average of the weights (train.ema_decay): its arithmetic, the swap evaluation uses,
// and the names it covers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include "hpctrain/train/weight_average.h"

namespace hpctrain::train {
namespace {

// After k updates towards a parameter that stays p, an average that started at a is
// p + decay^k (a - p).
TEST(WeightAverage, MovesTowardsTheParametersByOneMinusDecayPerUpdate) {
  at::Tensor weight = torch::full({3}, 1.0f);
  WeightAverage average({{"w", weight}}, 0.75);
  {
    const torch::NoGradGuard no_grad;
    weight.fill_(5.0f);
  }
  for (int k = 0; k < 3; ++k) average.update();
  const float expected = 5.0f + static_cast<float>(std::pow(0.75, 3)) * (1.0f - 5.0f);
  EXPECT_TRUE(torch::allclose(average.averages().front().second, torch::full({3}, expected), 0, 1e-6));
  EXPECT_EQ(average.bytes(), 12);
  average.restart();
  EXPECT_TRUE(torch::equal(average.averages().front().second, weight));
}

// Evaluation runs on the averages; the trained parameters come back after, also after an error.
TEST(WeightAverage, LendsTheAveragesToTheParametersAndTakesThemBack) {
  at::Tensor weight = torch::full({2}, 1.0f).requires_grad_(true);
  WeightAverage average({{"w", weight}}, 0.5);
  {
    const torch::NoGradGuard no_grad;
    weight.fill_(3.0f);
  }
  average.update();  // the average is 2
  float seen = 0;
  average.with_averaged_parameters([&] { seen = weight[0].item<float>(); });
  EXPECT_EQ(seen, 2.0f);
  EXPECT_EQ(weight[1].item<float>(), 3.0f);
  EXPECT_THROW(average.with_averaged_parameters([] { throw std::runtime_error("evaluation failed"); }),
               std::runtime_error);
  EXPECT_EQ(weight[0].item<float>(), 3.0f);
  EXPECT_TRUE(weight.requires_grad());
}

// What a checkpoint's ema group holds: the trainable parameters only.
TEST(WeightAverage, CoversTheTrainableParameters) {
  torch::nn::Linear linear(2, 2);
  struct Wrapped : model::Model {
    explicit Wrapped(torch::nn::Linear l) : layer(std::move(l)) {}
    torch::nn::Module& module() override { return *layer; }
    at::Tensor forward(const at::Tensor& x) override { return layer->forward(x); }
    torch::nn::Linear layer;
  };
  Wrapped model(linear);
  linear->bias.set_requires_grad(false);
  const NamedParameters covered = averaged_parameters(model);
  ASSERT_EQ(covered.size(), 1u);
  EXPECT_EQ(covered.front().first, "weight");
}

}  // namespace
}  // namespace hpctrain::train
