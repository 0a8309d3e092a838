// The moving average of the weights (train.ema_decay): its arithmetic, the swap evaluation uses,
// and the names it covers.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <stdexcept>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/sharding/weight_average.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::sharding {
namespace {

// After k updates towards a parameter that stays p, an average that started at a is
// p + decay^k (a - p).
TEST(WeightAverage, MovesTowardsTheParametersByOneMinusDecayPerUpdate) {
  at::Tensor weight = torch::full({3}, 1.0f);
  WeightAverage average(whole_slices({{"w", weight}}), 0.75, /*sharded=*/false);
  {
    const torch::NoGradGuard no_grad;
    weight.fill_(5.0f);
  }
  for (int k = 0; k < 3; ++k) average.update();
  const float expected = 5.0f + static_cast<float>(std::pow(0.75, 3)) * (1.0f - 5.0f);
  EXPECT_TRUE(torch::allclose(average.averages().front().data, torch::full({3}, expected), 0, 1e-6));
  EXPECT_EQ(average.bytes(), 12);
  average.restart();
  EXPECT_TRUE(torch::equal(average.averages().front().data, weight));
}

// Evaluation runs on the averages; the trained parameters come back after, also after an error.
TEST(WeightAverage, LendsTheAveragesToTheParametersAndTakesThemBack) {
  at::Tensor weight = torch::full({2}, 1.0f).requires_grad_(true);
  WeightAverage average(whole_slices({{"w", weight}}), 0.5, /*sharded=*/false);
  {
    const torch::NoGradGuard no_grad;
    weight.fill_(3.0f);
  }
  average.update();  // the average is 2
  float seen = 0;
  int changes = 0;
  average.with_averaged_weights([&] { seen = weight[0].item<float>(); }, [&] { ++changes; });
  EXPECT_EQ(seen, 2.0f);
  EXPECT_EQ(changes, 2);  // once lent, once given back
  EXPECT_EQ(weight[1].item<float>(), 3.0f);
  EXPECT_THROW(average.with_averaged_weights([] { throw std::runtime_error("evaluation failed"); }),
               std::runtime_error);
  EXPECT_EQ(weight[0].item<float>(), 3.0f);
  EXPECT_TRUE(weight.requires_grad());
}

// A sharded rank averages its share of a weight: it adds that share to a checkpoint as a slice of
// the whole tensor, and reads it back by range from a checkpoint any world size wrote.
TEST(WeightAverage, AShareIsCheckpointedAsASliceAndReadBackByRange) {
  at::Tensor share = torch::full({3}, 7.0f);
  WeightAverage average({{"w", {2, 3}, 2, share}}, 0.9, /*sharded=*/true);
  ckpt::Checkpoint checkpoint;
  average.add_to(checkpoint);
  EXPECT_EQ(checkpoint.groups.count("ema"), 0u);
  ASSERT_EQ(checkpoint.slices["ema"].size(), 1u);
  EXPECT_EQ(checkpoint.slices["ema"].front().offset, 2);
  EXPECT_EQ(checkpoint.slices["ema"].front().shape, (std::vector<std::int64_t>{2, 3}));

  const std::string dir =
      (std::filesystem::temp_directory_path() / ("hpctrain_ema_" + std::to_string(getpid()))).string();
  ckpt::Checkpoint whole;
  whole.groups["ema"] = {{"w", torch::arange(6, torch::kFloat).view({2, 3})}};
  const std::string path = ckpt::write_checkpoint(dir, whole);
  average.load(ckpt::CheckpointReader(path));
  EXPECT_TRUE(torch::equal(average.averages().front().data, torch::tensor({2.0f, 3.0f, 4.0f})));

  WeightAverage other_shape({{"w", {3, 2}, 0, share}}, 0.9, /*sharded=*/true);
  EXPECT_THROW(other_shape.load(ckpt::CheckpointReader(path)), CheckpointError);
  WeightAverage other_name({{"v", {2, 3}, 0, share}}, 0.9, /*sharded=*/true);
  EXPECT_THROW(other_name.load(ckpt::CheckpointReader(path)), CheckpointError);
  sys::remove_tree(dir);
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
  const optim::NamedParameters covered = weights::averaged_parameters(model);
  ASSERT_EQ(covered.size(), 1u);
  EXPECT_EQ(covered.front().first, "weight");
}

}  // namespace
}  // namespace hpctrain::sharding
