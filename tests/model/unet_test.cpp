// model.name=unet, DDPM's noise schedule (model/noise_schedule.h) and the samplers
// (model/diffusion_sampler.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ATen/ATen.h>

#include <set>

#include "hpctrain/core/error.h"
#include "hpctrain/model/diffusion_sampler.h"
#include "hpctrain/model/model.h"
#include "hpctrain/model/noise_schedule.h"

namespace hpctrain::model {
namespace {

config::ModelConfig unet_config(const std::string& mults = "1,2", bool attention = false) {
  config::ModelConfig c;
  c.name = config::ModelName::kUnet;
  c.unet_channels = 8;
  c.unet_mults = mults;
  c.unet_attention = attention;
  c.dropout = 0.0;
  return c;
}

std::set<std::string> unet_parameter_names(Model& net) {
  std::set<std::string> names;
  for (const auto& p : net.module().named_parameters()) names.insert(p.key());
  return names;
}

TEST(Unet, PredictsNoiseOfTheImagesShapeAndEveryParameterLearns) {
  torch::manual_seed(1);
  const auto net = make_model(unet_config("1,2,2", true), {{1, 28, 28}, 10});
  const at::Tensor noisy = torch::randn({3, 1, 28, 28});
  const at::Tensor noise = net->predict_noise(noisy, torch::tensor({0, 500, 999}), torch::tensor({0, 9, -1}));
  EXPECT_EQ(noise.sizes(), noisy.sizes());
  noise.pow(2).mean().backward();
  for (const auto& p : net->module().named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
  EXPECT_THROW(net->forward(noisy), Error);  // a denoiser runs through train.objective=diffusion
}

// The names a PyTorch twin declares (docs/diffusion.md): levels in ModuleLists, up.0 the deepest.
TEST(Unet, ParameterNamesFollowTheDocumentedLayout) {
  const auto net = make_model(unet_config("1,2,2", true), {{1, 28, 28}, 10});
  const std::set<std::string> names = unet_parameter_names(*net);
  for (const char* name : {"time_in.weight", "time_out.bias", "class_embed.weight", "conv_in.weight",
                           "down.0.res.norm1.weight", "down.0.res.conv1.weight", "down.0.res.emb_proj.weight",
                           "down.0.resample.weight", "down.1.res.shortcut.weight", "down.2.attn.qkv.weight",
                           "mid_res1.conv2.weight", "mid_attn.proj.bias", "mid_res2.norm2.bias",
                           "up.0.res.shortcut.weight", "up.0.attn.norm.weight", "up.0.resample.weight",
                           "up.2.res.conv1.weight", "norm_out.weight", "conv_out.bias"}) {
    EXPECT_EQ(names.count(name), 1u) << name;
  }
  EXPECT_EQ(names.count("down.2.resample.weight"), 0u);  // the lowest level keeps its resolution
  EXPECT_EQ(names.count("up.2.resample.weight"), 0u);
  // 11 rows: ten classes and "no class".
  EXPECT_EQ(net->module().named_parameters()["class_embed.weight"].size(0), 11);
}

TEST(Unet, TheClassChangesThePredictionUnlessTheModelIsUnconditional) {
  for (const bool conditional : {true, false}) {
    config::ModelConfig c = unet_config();
    c.unet_class_cond = conditional;
    torch::manual_seed(2);
    const auto net = make_model(c, {{1, 8, 8}, 4});
    torch::nn::init::normal_(net->module().named_parameters()["conv_out.weight"]);  // zero-free output
    const at::Tensor noisy = torch::randn({1, 1, 8, 8});
    const at::Tensor step = torch::tensor({7});
    const at::Tensor as_two = net->predict_noise(noisy, step, torch::tensor({2}));
    const at::Tensor as_none = net->predict_noise(noisy, step, torch::tensor({-1}));
    EXPECT_EQ(at::equal(as_two, as_none), !conditional);
    EXPECT_EQ(unet_parameter_names(*net).count("class_embed.weight"), conditional ? 1u : 0u);
  }
}

TEST(Unet, ShapesItCannotTakeAreOneLineConfigErrors) {
  config::ModelConfig odd = unet_config();
  odd.unet_channels = 12;
  EXPECT_THROW(make_model(odd, {{1, 28, 28}, 10}), ConfigError);
  try {
    make_model(unet_config("1,2,2,2"), {{1, 28, 28}, 10});
    FAIL() << "28x28 does not halve three times";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sides divide by 8"), std::string::npos) << e.what();
  }
  EXPECT_THROW(make_model(unet_config(), {{784}, 10}), ConfigError);
  EXPECT_NO_THROW(make_model(unet_config("1,2,2"), {{3, 32, 32}, 10}));
}

// Reference values from PyTorch (python3-torch): torch.cumprod(1 - betas) of DDPM's linear
// schedule and of Nichol and Dhariwal's cosine one.
TEST(NoiseSchedule, AlphaBarMatchesTheReferenceSchedules) {
  const NoiseSchedule linear(config::NoiseSchedule::kLinear, 1000);
  ASSERT_EQ(linear.steps(), 1000);
  EXPECT_DOUBLE_EQ(linear.betas().front(), 1e-4);
  EXPECT_NEAR(linear.betas().back(), 0.02, 1e-15);
  EXPECT_NEAR(linear.alpha_bar()[0], 0.9999, 1e-15);
  EXPECT_NEAR(linear.alpha_bar()[499], 0.07858724288177824, 1e-12);
  EXPECT_NEAR(linear.alpha_bar()[999], 4.035829765375676e-05, 1e-15);
  const NoiseSchedule cosine(config::NoiseSchedule::kCosine, 1000);
  EXPECT_NEAR(cosine.alpha_bar()[0], 0.999958715775178, 1e-12);
  EXPECT_NEAR(cosine.alpha_bar()[499], 0.4938435904406382, 1e-12);
  EXPECT_NEAR(cosine.alpha_bar()[999], 2.4287669070348567e-09, 1e-15);
  // Fewer steps: betas scaled by 1000 / T, ending as noisy.
  const NoiseSchedule short_linear(config::NoiseSchedule::kLinear, 100);
  EXPECT_NEAR(short_linear.alpha_bar()[99], 2.0390089755640772e-05, 1e-15);
}

TEST(NoiseSchedule, AddNoiseMixesImageAndNoiseByAlphaBar) {
  const NoiseSchedule schedule(config::NoiseSchedule::kLinear, 1000);
  const at::Tensor clean = torch::randn({2, 1, 4, 4});
  const at::Tensor noise = torch::randn({2, 1, 4, 4});
  const at::Tensor noisy = schedule.add_noise(clean, noise, torch::tensor({0, 999}));
  for (int b = 0; b < 2; ++b) {
    const double alpha_bar = schedule.alpha_bar()[b == 0 ? 0 : 999];
    const at::Tensor expected = std::sqrt(alpha_bar) * clean[b] + std::sqrt(1 - alpha_bar) * noise[b];
    EXPECT_TRUE(at::allclose(noisy[b], expected, 1e-6, 1e-6)) << b;
  }
}

TEST(DiffusionSampler, VisitsEvenlySpacedStepsFromTheNoisiestDown) {
  const std::vector<std::int64_t> fifty = sampling_steps(1000, 50);
  ASSERT_EQ(fifty.size(), 50u);
  EXPECT_EQ(fifty.front(), 999);
  EXPECT_EQ(fifty.back(), 0);
  for (std::size_t i = 1; i < fifty.size(); ++i) EXPECT_LT(fifty[i], fifty[i - 1]);
  EXPECT_EQ(sampling_steps(1000, 1), (std::vector<std::int64_t>{999}));
  EXPECT_EQ(sampling_steps(4, 4), (std::vector<std::int64_t>{3, 2, 1, 0}));
}

// A denoiser that knows the answer: at every step it predicts the noise that separates x_t from
// `target` at that step's level. Both samplers must then end exactly at `target`.
class OracleDenoiser final : public torch::nn::Module, public Model {
 public:
  OracleDenoiser(const NoiseSchedule& schedule, at::Tensor target) : schedule_(schedule), target_(std::move(target)) {}
  at::Tensor forward(const at::Tensor& input) override { return input; }
  at::Tensor predict_noise(const at::Tensor& noisy, const at::Tensor& steps, const at::Tensor& /*labels*/) override {
    const double alpha_bar = schedule_.alpha_bar()[static_cast<std::size_t>(steps[0].item<std::int64_t>())];
    return (noisy - std::sqrt(alpha_bar) * target_) / std::sqrt(1 - alpha_bar);
  }
  torch::nn::Module& module() override { return *this; }

 private:
  const NoiseSchedule& schedule_;
  at::Tensor target_;
};

TEST(DiffusionSampler, BothSamplersEndAtTheImageAPerfectDenoiserSees) {
  const NoiseSchedule schedule(config::NoiseSchedule::kLinear, 100);
  const at::Tensor target = torch::rand({2, 1, 4, 4}) * 1.6 - 0.8;  // inside the clamp [-1, 1]
  OracleDenoiser oracle(schedule, target);
  for (const DiffusionSampler kind : {DiffusionSampler::kDdim, DiffusionSampler::kDdpm}) {
    DiffusionSampling options;
    options.sampler = kind;
    options.steps = 10;
    const at::Tensor images = sample_images(oracle, schedule, options, {1, 4, 4}, {0, 1}, {0, 1}, c10::kCPU);
    EXPECT_TRUE(at::allclose(images, target, 1e-4, 1e-5)) << (images - target).abs().max();
  }
}

// Image i's draws come from (seed, i): the same images whatever batches they are made in.
TEST(DiffusionSampler, AnImageIsTheSameInAnyBatchAndGuidanceChangesIt) {
  torch::manual_seed(4);
  const auto net = make_model(unet_config(), {{1, 8, 8}, 4});
  net->module().eval();
  const NoiseSchedule schedule(config::NoiseSchedule::kCosine, 50);
  for (const DiffusionSampler kind : {DiffusionSampler::kDdim, DiffusionSampler::kDdpm}) {
    DiffusionSampling options;
    options.sampler = kind;
    options.steps = 5;
    options.seed = 11;
    const at::Tensor together = sample_images(*net, schedule, options, {1, 8, 8}, {1, 2, -1}, {3, 4, 5}, c10::kCPU);
    const at::Tensor first = sample_images(*net, schedule, options, {1, 8, 8}, {1}, {3}, c10::kCPU);
    const at::Tensor rest = sample_images(*net, schedule, options, {1, 8, 8}, {2, -1}, {4, 5}, c10::kCPU);
    EXPECT_TRUE(at::allclose(together, torch::cat({first, rest}), 1e-5, 1e-6));
    options.guidance = 3.0;
    const at::Tensor guided = sample_images(*net, schedule, options, {1, 8, 8}, {1, 2, -1}, {3, 4, 5}, c10::kCPU);
    EXPECT_FALSE(at::allclose(guided.slice(0, 0, 2), together.slice(0, 0, 2)));
    // No class to guide towards: the unconditional prediction either way.
    EXPECT_TRUE(at::allclose(guided[2], together[2], 1e-5, 1e-6));
    options.guidance = 1.0;
    options.seed = 12;
    EXPECT_FALSE(at::allclose(sample_images(*net, schedule, options, {1, 8, 8}, {1, 2, -1}, {3, 4, 5}, c10::kCPU),
                              together));
  }
}

}  // namespace
}  // namespace hpctrain::model
