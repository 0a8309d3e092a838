// Schedules, learning-rate scaling, the global batch and the optimizer options, against values
// computed by hand.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <filesystem>

#include "hpctrain/config/parser.h"
#include "config_error.h"
#include "hpctrain/core/error.h"
#include "hpctrain/optim/lr_schedule.h"
#include "hpctrain/optim/optimizer.h"
#include "hpctrain/runtime/global_batch.h"
#include "hpctrain/train/step_loss.h"

namespace hpctrain::optim {
namespace {

using testing::config_error;

TEST(Optimization, StepScheduleDropsByGammaEveryStepEveryAfterTheWarmup) {
  config::OptimConfig o;
  o.lr = 0.1;
  o.schedule = config::Schedule::kStep;
  o.warmup_steps = 5;
  o.step_every = 10;
  o.step_gamma = 0.5;
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 0, 100), 0.02);
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 4, 100), 0.1);
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 14, 100), 0.1);   // 9 steps after the warmup
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 15, 100), 0.05);  // the first drop
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 34, 100), 0.025);
  EXPECT_DOUBLE_EQ(lr_at(o, o.lr, 35, 100), 0.0125);
  EXPECT_DOUBLE_EQ(lr_at(o, 0.4, 35, 100), 0.05);  // from a scaled peak
  o.step_every = 0;
  EXPECT_NE(config_error([&] { check_schedule_options(o); }).find("optim.step_every > 0"), std::string::npos);
}

TEST(Optimization, LinearAndSqrtScalingFollowTheGlobalBatch) {
  config::OptimConfig o;
  o.lr = 0.1;
  o.lr_scaling = config::LrScaling::kNone;
  EXPECT_DOUBLE_EQ(peak_lr(o, 512), 0.1);
  o.base_batch = 128;
  o.lr_scaling = config::LrScaling::kLinear;
  EXPECT_DOUBLE_EQ(peak_lr(o, 512), 0.4);
  EXPECT_DOUBLE_EQ(peak_lr(o, 64), 0.05);
  o.lr_scaling = config::LrScaling::kSqrt;
  EXPECT_DOUBLE_EQ(peak_lr(o, 512), 0.2);
  o.base_batch = 0;
  EXPECT_NE(config_error([&] { check_schedule_options(o); }).find("needs optim.base_batch"), std::string::npos);
}

TEST(Optimization, TheGlobalBatchFixesTheAccumulationForAnyWorldThatDividesIt) {
  config::TrainConfig t;
  t.batch_size = 32;
  t.accum_steps = 3;
  EXPECT_EQ(runtime::accumulation_steps(t, 5), 3);  // no global batch: accum_steps decides
  t.accum_steps = 1;
  t.global_batch = 256;
  EXPECT_EQ(runtime::accumulation_steps(t, 1), 8);
  EXPECT_EQ(runtime::accumulation_steps(t, 2), 4);
  EXPECT_EQ(runtime::accumulation_steps(t, 8), 1);
  EXPECT_NE(config_error([&] { runtime::accumulation_steps(t, 3); })
                .find("train.global_batch=256 is not a multiple of 3 rank(s) x train.batch_size=32 = 96"),
            std::string::npos);
  t.accum_steps = 2;
  EXPECT_NE(config_error([&] { runtime::accumulation_steps(t, 2); }).find("set only one"), std::string::npos);
}

config::OptimConfig sgd(double momentum, bool nesterov) {
  config::OptimConfig o;
  o.name = config::OptimizerName::kSgd;
  o.lr = 0.1;
  o.momentum = momentum;
  o.nesterov = nesterov;
  return o;
}

TEST(Optimization, NesterovSgdTakesTheHandComputedSteps) {
  const at::Tensor p = torch::ones({1}).set_requires_grad(true);
  auto optimizer = make_optimizer(sgd(0.9, true), {{"p", p}});
  for (int k = 0; k < 2; ++k) {
    optimizer->zero_grad();
    p.square().sum().backward();  // gradient 2p
    optimizer->step();
  }
  // Step 1: g = 2, buf = 2, update g + 0.9 buf = 3.8: p = 0.62.
  // Step 2: g = 1.24, buf = 0.9 * 2 + 1.24 = 3.04, update 1.24 + 0.9 * 3.04 = 3.976: p = 0.2224.
  EXPECT_NEAR(p.item<double>(), 0.2224, 1e-6);
  EXPECT_NE(config_error([] { make_optimizer(sgd(0.0, true), {}); }).find("optim.momentum > 0"), std::string::npos);
  config::OptimConfig adamw = sgd(0.9, true);
  adamw.name = config::OptimizerName::kAdamW;
  EXPECT_NE(config_error([&] { check_optimizer_options(adamw); }).find("needs optim.name=sgd"), std::string::npos);
}

TEST(Optimization, BiasesAndNormWeightsCanBeExemptFromWeightDecay) {
  for (const bool decay_all : {true, false}) {
    config::OptimConfig o;
    o.name = config::OptimizerName::kAdamW;
    o.lr = 0.1;
    o.weight_decay = 0.5;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    o.decay_bias_and_norm = decay_all;
    const at::Tensor w = torch::ones({2, 2}).set_requires_grad(true);
    const at::Tensor b = torch::ones({2}).set_requires_grad(true);
    auto optimizer = make_optimizer(o, {{"w", w}, {"b", b}});
    (w.sum() * 0 + b.sum() * 0).backward();  // zero gradients: only the decay moves a parameter
    optimizer->step();
    EXPECT_NEAR(w[0][0].item<double>(), 1 - 0.1 * 0.5, 1e-7) << decay_all;
    EXPECT_NEAR(b[0].item<double>(), decay_all ? 1 - 0.1 * 0.5 : 1.0, 1e-7) << decay_all;
    EXPECT_EQ(optimizer->param_groups().size(), decay_all ? 1u : 2u);
  }
}

}  // namespace
}  // namespace hpctrain::optim

namespace hpctrain::optim {
namespace {

// Every configuration shipped in configs/ resolves (known keys, typed, in range) and passes the
// checks across options that the trainer makes at start-up.
TEST(ShippedConfigs, EveryConfigResolvesAndPassesTheCrossOptionChecks) {
  int checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(HPCTRAIN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".ini") continue;
    SCOPED_TRACE(entry.path().string());
    const config::Config resolved = config::resolve(entry.path().string(), {});
    EXPECT_NO_THROW(check_optimizer_options(resolved.optim));
    EXPECT_NO_THROW(check_schedule_options(resolved.optim));
    EXPECT_LE(2 * resolved.data.shuffle_window_mb, resolved.data.cache_mb);
    ++checked;
  }
  EXPECT_GE(checked, 3);  // fashion_cnn, fashion_resnet, mlp
}

// A classifier's loss per sample, and a language model's per window: the mean over its tokens.
TEST(PerSampleLoss, IsCrossEntropyPerSampleAndPerWindowMeanOverTokens) {
  torch::manual_seed(3);
  const at::Tensor logits = torch::randn({4, 10});
  const at::Tensor labels = torch::tensor({1, 9, 0, 4}, torch::kLong);
  const at::Tensor per_sample = train::per_sample_loss(logits, labels, 0.0);
  ASSERT_EQ(per_sample.sizes(), (std::vector<std::int64_t>{4}));
  const at::Tensor log_probs = torch::log_softmax(logits, 1);
  for (std::int64_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(per_sample[i].item<double>(), -log_probs[i][labels[i].item<std::int64_t>()].item<double>(), 1e-6);
  }
  const at::Tensor next = torch::randn({2, 3, 5}, torch::kBFloat16);  // [B, T, V], as under autocast
  const at::Tensor tokens = torch::tensor({{0, 4, 2}, {3, 3, 1}}, torch::kLong);
  const at::Tensor per_window = train::per_sample_loss(next, tokens, 0.0);
  ASSERT_EQ(per_window.sizes(), (std::vector<std::int64_t>{2}));
  EXPECT_EQ(per_window.scalar_type(), at::kFloat);
  const at::Tensor token_log_probs = torch::log_softmax(next.to(at::kFloat), 2);
  for (std::int64_t b = 0; b < 2; ++b) {
    double sum = 0;
    for (std::int64_t t = 0; t < 3; ++t) sum -= token_log_probs[b][t][tokens[b][t].item<std::int64_t>()].item<double>();
    EXPECT_NEAR(per_window[b].item<double>(), sum / 3, 1e-5);
  }
  // Label smoothing is passed through.
  EXPECT_GT(train::per_sample_loss(logits, labels, 0.1)[0].item<double>(), 0.0);
  EXPECT_NE(train::per_sample_loss(logits, labels, 0.1)[0].item<double>(), per_sample[0].item<double>());
}

}  // namespace
}  // namespace hpctrain::optim
