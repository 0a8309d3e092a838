// model.activation_checkpointing (src/model/activation_checkpoint.h): a gpt whose blocks are
// recomputed in backward computes the same loss and the same gradients as one that keeps its
// activations, with dropout drawing the same masks, under bf16 autocast, with a frozen base and
// LoRA adapters (whose blocks' inputs need no gradient), and keeps nothing for backward without
// gradients. Any other model refuses the option.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "hpctrain/core/error.h"
#include "hpctrain/model/autocast.h"
#include "hpctrain/model/model.h"

namespace hpctrain::model {
namespace {

constexpr std::int64_t kTinyVocab = 40;
constexpr std::int64_t kTinyBlock = 8;

config::ModelConfig gpt_config(bool recompute) {
  config::ModelConfig config;
  config.name = config::ModelName::kGpt;
  config.gpt_layers = 3;
  config.gpt_heads = 2;
  config.gpt_embd = 16;
  config.gpt_block_size = kTinyBlock;
  config.dropout = 0.2;
  config.activation_checkpointing = recompute;
  return config;
}

struct Gradients {
  at::Tensor loss;
  std::map<std::string, at::Tensor> grads;  // of the parameters that train
};

// One training forward and backward from a fixed seed (the dropout masks), autocast as given.
Gradients forward_backward(Model& model, std::optional<at::ScalarType> autocast) {
  torch::manual_seed(3);
  const at::Tensor tokens = torch::randint(kTinyVocab, {2, kTinyBlock}, torch::kLong);
  model.module().train();
  at::Tensor logits;
  {
    const AutocastScope scope(c10::DeviceType::CPU, autocast);
    logits = model.forward(tokens);
  }
  const at::Tensor loss = torch::cross_entropy_loss(logits.reshape({-1, kTinyVocab}).to(torch::kFloat), tokens.reshape(-1));
  loss.backward();
  Gradients out{loss.detach(), {}};
  for (const auto& p : model.module().named_parameters()) {
    if (!p.value().requires_grad()) continue;
    EXPECT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    if (p.value().grad().defined()) out.grads.emplace(p.key(), p.value().grad().clone());
  }
  return out;
}

void expect_same(const Gradients& kept, const Gradients& recomputed) {
  EXPECT_TRUE(torch::equal(kept.loss, recomputed.loss)) << kept.loss << " vs " << recomputed.loss;
  ASSERT_EQ(kept.grads.size(), recomputed.grads.size());
  for (const auto& [name, grad] : kept.grads) {
    EXPECT_TRUE(torch::allclose(grad, recomputed.grads.at(name), 1e-5, 1e-7)) << name;
  }
}

std::shared_ptr<Model> tiny_gpt(const config::ModelConfig& config) {
  torch::manual_seed(7);
  return make_model(config, {{kTinyBlock}, kTinyVocab, true});
}

TEST(ActivationCheckpointTest, RecomputedBlocksGiveTheSameLossAndGradients) {
  const auto kept = tiny_gpt(gpt_config(false));
  const auto recomputed = tiny_gpt(gpt_config(true));
  expect_same(forward_backward(*kept, std::nullopt), forward_backward(*recomputed, std::nullopt));
}

TEST(ActivationCheckpointTest, TheSecondForwardRunsUnderTheFirstOnesAutocast) {
  const auto kept = tiny_gpt(gpt_config(false));
  const auto recomputed = tiny_gpt(gpt_config(true));
  expect_same(forward_backward(*kept, at::kBFloat16), forward_backward(*recomputed, at::kBFloat16));
}

TEST(ActivationCheckpointTest, AdaptersOfAFrozenBaseGetTheirGradients) {
  config::ModelConfig with = gpt_config(true);
  config::ModelConfig without = gpt_config(false);
  for (auto* config : {&with, &without}) {
    config->lora_rank = 2;
    config->lora_targets = "attn,fc";
  }
  const auto kept = tiny_gpt(without);
  const auto recomputed = tiny_gpt(with);
  const Gradients a = forward_backward(*kept, std::nullopt);
  const Gradients b = forward_backward(*recomputed, std::nullopt);
  EXPECT_EQ(b.grads.count("transformer.h.0.attn.c_attn.lora_A.weight"), 1u);
  expect_same(a, b);
}

TEST(ActivationCheckpointTest, WithoutGradientsTheBlocksJustRun) {
  const auto kept = tiny_gpt(gpt_config(false));
  const auto recomputed = tiny_gpt(gpt_config(true));
  kept->module().eval();
  recomputed->module().eval();
  const torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(kTinyVocab, {2, kTinyBlock}, torch::kLong);
  const at::Tensor out = recomputed->forward(tokens);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(torch::equal(kept->forward(tokens), out));
}

TEST(ActivationCheckpointTest, OtherModelsRefuseIt) {
  config::ModelConfig config;
  config.name = config::ModelName::kMlp;
  config.activation_checkpointing = true;
  try {
    make_model(config, {{4}, 3});
    FAIL() << "mlp took model.activation_checkpointing";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.activation_checkpointing recomputes a gpt's or llama's blocks"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::model
