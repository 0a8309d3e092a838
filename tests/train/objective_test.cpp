// train.objective: what each sample's diffusion draws depend on, and which models each objective
// trains.
#include "hpctrain/train/objective.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ATen.h>

#include <numeric>

#include "hpctrain/core/error.h"
#include "hpctrain/data/sample_keys.h"
#include "hpctrain/model/model.h"

namespace hpctrain::train {
namespace {

config::Config diffusion_config(double cond_drop) {
  config::Config config;
  config.model.name = config::ModelName::kUnet;
  config.model.unet_channels = 8;
  config.model.unet_mults = "1,2";
  config.model.dropout = 0.0;
  config.model.cond_drop = cond_drop;
  config.train.objective = config::Objective::kDiffusion;
  return config;
}

// Samples `indices` of a fixed set of 8x8 images, as a batch of epoch `epoch`.
data::Batch denoiser_batch(const std::vector<std::int64_t>& indices, std::int64_t epoch) {
  torch::manual_seed(5);
  const at::Tensor images = torch::randn({16, 1, 8, 8});
  const at::Tensor index = torch::tensor(indices);
  data::Batch batch;
  batch.input = images.index_select(0, index);
  batch.target = index % 4;
  batch.keys = data::sample_keys(42, epoch, indices);
  return batch;
}

// A sample's loss is the same in any batch it is part of: what a resume at another world size needs.
TEST(DiffusionObjective, ASamplesLossDependsOnTheSampleNotOnItsBatch) {
  const config::Config config = diffusion_config(0.1);
  torch::manual_seed(3);
  const auto net = model::make_model(config.model, {{1, 8, 8}, 4});
  const auto objective = make_objective(config);
  net->module().eval();
  const torch::NoGradGuard no_grad;
  const at::Tensor together = objective->per_sample_loss(objective->predict(*net, denoiser_batch({3, 9, 12, 1}, 2)));
  const at::Tensor first = objective->per_sample_loss(objective->predict(*net, denoiser_batch({3, 9}, 2)));
  const at::Tensor second = objective->per_sample_loss(objective->predict(*net, denoiser_batch({12, 1}, 2)));
  EXPECT_TRUE(at::allclose(together, torch::cat({first, second}), 1e-6, 1e-7)) << together << first << second;
  const at::Tensor reordered = objective->per_sample_loss(objective->predict(*net, denoiser_batch({1, 12, 9, 3}, 2)));
  EXPECT_TRUE(at::allclose(together, reordered.flip(0), 1e-6, 1e-7));
  // Another epoch draws other steps and noise.
  const at::Tensor next_epoch = objective->per_sample_loss(objective->predict(*net, denoiser_batch({3, 9, 12, 1}, 3)));
  EXPECT_FALSE(at::allclose(together, next_epoch));
  EXPECT_EQ(together.scalar_type(), at::kFloat);
  EXPECT_EQ(together.sizes(), (std::vector<std::int64_t>{4}));
}

// The target is the noise that was added: unit-variance noise, and a loss that is its mean square
// against what the model saw.
TEST(DiffusionObjective, TheTargetIsTheAddedNoiseAndTheLossItsMeanSquaredError) {
  const config::Config config = diffusion_config(0.0);
  const auto net = model::make_model(config.model, {{1, 8, 8}, 4});
  const auto objective = make_objective(config);
  std::vector<std::int64_t> indices(16);
  for (std::int64_t i = 0; i < 16; ++i) indices[static_cast<std::size_t>(i)] = i;
  const Prediction prediction = objective->predict(*net, denoiser_batch(indices, 0));
  EXPECT_EQ(prediction.target.sizes(), (std::vector<std::int64_t>{16, 1, 8, 8}));
  EXPECT_NEAR(prediction.target.mean().item<double>(), 0.0, 0.1);
  EXPECT_NEAR(prediction.target.std().item<double>(), 1.0, 0.1);
  const at::Tensor expected = (prediction.output - prediction.target).pow(2).mean({1, 2, 3});
  EXPECT_TRUE(at::allclose(objective->per_sample_loss(prediction), expected));
}

// model.cond_drop drops classes in training only, for about that fraction of the samples.
TEST(DiffusionObjective, ClassesAreDroppedInTrainingAtTheConfiguredRate) {
  class LabelRecorder final : public torch::nn::Module, public model::Model {
   public:
    at::Tensor forward(const at::Tensor& input) override { return input; }
    at::Tensor predict_noise(const at::Tensor& noisy, const at::Tensor& /*steps*/, const at::Tensor& labels) override {
      seen = labels;
      return noisy;
    }
    torch::nn::Module& module() override { return *this; }
    at::Tensor seen;
  };
  const auto objective = make_objective(diffusion_config(0.25));
  LabelRecorder recorder;
  std::vector<std::int64_t> indices(4000);
  std::iota(indices.begin(), indices.end(), 0);
  data::Batch batch;
  batch.input = torch::zeros({4000, 1, 8, 8});
  batch.target = torch::arange(4000) % 4;
  batch.keys = data::sample_keys(42, 0, indices);
  recorder.train();
  objective->predict(recorder, batch);
  const double dropped = recorder.seen.eq(-1).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.25, 0.03);
  EXPECT_TRUE(at::equal(recorder.seen.masked_select(recorder.seen.ne(-1)),
                        batch.target.masked_select(recorder.seen.ne(-1))));
  recorder.eval();
  objective->predict(recorder, batch);
  EXPECT_TRUE(at::equal(recorder.seen, batch.target));
}

TEST(Objectives, EachTrainsOnlyTheModelsItFitsWithAOneLineError) {
  config::Config config = diffusion_config(0.1);
  config.model.name = config::ModelName::kMlp;
  try {
    make_objective(config);
    FAIL() << "diffusion trained an mlp";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("use model.name=unet"), std::string::npos) << e.what();
  }
  config = diffusion_config(0.1);
  config.train.objective = config::Objective::kCrossEntropy;
  EXPECT_THROW(make_objective(config), ConfigError);
  config = diffusion_config(0.1);
  config.train.label_smoothing = 0.1;
  EXPECT_THROW(make_objective(config), ConfigError);
  EXPECT_FALSE(make_objective(diffusion_config(0.1))->has_accuracy());
  EXPECT_TRUE(make_objective(config::Config{})->has_accuracy());
}

TEST(SampleKeys, DependOnSeedEpochAndIndexOnly) {
  const at::Tensor keys = data::sample_keys(7, 1, {5, 6, 5});
  EXPECT_EQ(keys[0].item<std::int64_t>(), keys[2].item<std::int64_t>());
  EXPECT_NE(keys[0].item<std::int64_t>(), keys[1].item<std::int64_t>());
  EXPECT_TRUE(at::equal(keys.slice(0, 1, 2), data::sample_keys(7, 1, {6})));
  EXPECT_FALSE(at::equal(keys, data::sample_keys(7, 2, {5, 6, 5})));
  EXPECT_FALSE(at::equal(keys, data::sample_keys(8, 1, {5, 6, 5})));
}

}  // namespace
}  // namespace hpctrain::train
