#include "hpctrain/optim/loss_scaler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>

#include "hpctrain/core/error.h"

namespace hpctrain::optim {
namespace {

TEST(LossScaler, UnscaleDividesEveryGradientAndFindsOverflow) {
  const LossScaler scaler({8.0, 2.0, 0.5, 2000});
  std::vector<at::Tensor> gradients{torch::full({3}, 8.0), at::Tensor(), torch::full({2, 2}, -4.0)};
  EXPECT_TRUE(scaler.unscale(gradients));
  EXPECT_TRUE(torch::equal(gradients[0], torch::ones({3})));
  EXPECT_TRUE(torch::equal(gradients[2], torch::full({2, 2}, -0.5)));
  EXPECT_TRUE(scaler.unscale({}));  // no gradient at all: nothing overflowed

  for (const float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<at::Tensor> one_bad{torch::ones({4}), torch::ones({5})};
    one_bad[1][3] = bad;
    EXPECT_FALSE(scaler.unscale(one_bad)) << bad;
  }
}

TEST(LossScaler, BacksOffOnOverflowAndGrowsAfterAnIntervalOfGoodSteps) {
  LossScaler scaler({1024.0, 2.0, 0.5, 3});
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1024.0);
  scaler.update(false);  // an overflow restarts the count of good steps
  EXPECT_EQ(scaler.scale(), 512.0);
  scaler.update(true);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 512.0);
  scaler.update(true);
  EXPECT_EQ(scaler.scale(), 1024.0);
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale(), 256.0);
}

TEST(LossScaler, StateRoundTripsThroughACheckpointAndContinuesTheCount) {
  LossScaler a({1024.0, 2.0, 0.5, 3});
  a.update(false);
  a.update(true);
  a.update(true);  // one more good step grows the scale
  LossScaler b({1024.0, 2.0, 0.5, 3});
  b.load_state(a.state());
  EXPECT_EQ(b.scale(), 512.0);
  b.update(true);
  EXPECT_EQ(b.scale(), 1024.0);

  EXPECT_THROW(b.load_state({{"good_steps", torch::full({}, 2, torch::kLong)}}), CheckpointError);
  EXPECT_THROW(b.load_state({{"scale", torch::full({}, -1.0, torch::kDouble)}}), CheckpointError);
  EXPECT_THROW(b.load_state({{"scale", torch::ones({2}, torch::kDouble)}}), CheckpointError);
}

// The trainer's use: backward of loss x scale, then unscale, gives the gradients of the loss.
TEST(LossScaler, ScaledBackwardThenUnscaleGivesTheLossGradients) {
  torch::manual_seed(3);
  torch::nn::Linear reference(4, 3);
  torch::nn::Linear scaled(4, 3);
  scaled->weight.data().copy_(reference->weight.data());
  scaled->bias.data().copy_(reference->bias.data());
  const at::Tensor x = torch::randn({5, 4});
  reference->forward(x).pow(2).mean().backward();
  const LossScaler scaler({65536.0, 2.0, 0.5, 2000});
  (scaled->forward(x).pow(2).mean() * scaler.scale()).backward();
  ASSERT_TRUE(scaler.unscale({scaled->weight.grad(), scaled->bias.grad()}));
  EXPECT_TRUE(torch::allclose(scaled->weight.grad(), reference->weight.grad(), 1e-5, 1e-7));
  EXPECT_TRUE(torch::allclose(scaled->bias.grad(), reference->bias.grad(), 1e-5, 1e-7));
}

}  // namespace
}  // namespace hpctrain::optim
