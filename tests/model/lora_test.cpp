// LoRA adapters (model/lora.h) on the gpt model: an adapted model starts as its base; only the
// adapters (and what model.lora_train keeps) learn, under PEFT's names; merging folds them into
// the weights with the adapted model's logits; a checkpoint of one holds the base's checksums, not
// the base, and a changed base is refused (weights/lora_base.h).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <map>
#include <set>

#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/model/lora.h"
#include "hpctrain/model/model.h"
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/weights/lora_base.h"
#include "hpctrain/weights/model_weights.h"
#include "model/lora_adapter.h"

namespace hpctrain::model {
namespace {

constexpr std::int64_t kVocab = 40;
constexpr std::int64_t kBlock = 8;

config::ModelConfig gpt_config(std::int64_t lora_rank, const std::string& targets = "attn") {
  config::ModelConfig config;
  config.name = config::ModelName::kGpt;
  config.gpt_layers = 2;
  config.gpt_heads = 2;
  config.gpt_embd = 16;
  config.gpt_block_size = kBlock;
  config.dropout = 0;
  config.lora_rank = lora_rank;
  config.lora_alpha = 16;
  config.lora_targets = targets;
  return config;
}

std::shared_ptr<Model> build(const config::ModelConfig& config, std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  return make_model(config, {{kBlock}, kVocab, true});
}

at::Tensor tokens() {
  torch::manual_seed(99);
  return torch::randint(kVocab, {3, kBlock}, torch::kLong);
}

std::map<std::string, at::Tensor> by_name(Model& model) {
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.module().named_parameters()) out.emplace(p.key(), p.value());
  return out;
}

// Gives every lora_B a random value, as training would, so the adapters change the logits.
void train_adapters(Model& model) {
  const torch::NoGradGuard no_grad;
  torch::manual_seed(5);
  for (auto& [name, p] : by_name(model)) {
    if (name.find("lora_B") != std::string::npos) p.normal_(0.0, 0.05);
  }
}

const char* kAllTargets = "attn,proj,fc,mlp_proj,head";

TEST(LoraTest, AnAdaptedModelStartsAsItsBase) {
  const std::shared_ptr<Model> base = build(gpt_config(0));
  const std::shared_ptr<Model> adapted = build(gpt_config(4, kAllTargets));
  // The base's weights are drawn first: the same as without adapters.
  const auto adapted_weights = by_name(*adapted);
  for (const auto& [name, p] : by_name(*base)) {
    ASSERT_EQ(adapted_weights.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(p, adapted_weights.at(name))) << name;
  }
  base->module().eval();
  adapted->module().eval();
  EXPECT_TRUE(torch::equal(base->forward(tokens()), adapted->forward(tokens())));
}

TEST(LoraTest, OnlyTheAdaptersLearnUnderPeftNames) {
  const std::shared_ptr<Model> model = build(gpt_config(4, kAllTargets));
  std::set<std::string> trainable;
  for (const auto& [name, p] : by_name(*model)) {
    if (p.requires_grad()) trainable.insert(name);
  }
  const std::set<std::string> expected_shapes_checked{"transformer.h.0.attn.c_attn.lora_A.weight",
                                                       "transformer.h.0.attn.c_attn.lora_B.weight",
                                                       "transformer.h.1.mlp.c_proj.lora_B.weight",
                                                       "lm_head.lora_A.weight", "lm_head.lora_B.weight"};
  for (const std::string& name : expected_shapes_checked) EXPECT_EQ(trainable.count(name), 1u) << name;
  EXPECT_EQ(trainable.size(), 2u * (2 * 4 + 1));  // A and B of 4 layers in each of 2 blocks, and the head
  const auto weights = by_name(*model);
  EXPECT_EQ(weights.at("transformer.h.0.attn.c_attn.lora_A.weight").sizes(), (std::vector<std::int64_t>{4, 16}));
  EXPECT_EQ(weights.at("transformer.h.0.attn.c_attn.lora_B.weight").sizes(), (std::vector<std::int64_t>{48, 4}));
  EXPECT_EQ(weights.at("lm_head.lora_B.weight").sizes(), (std::vector<std::int64_t>{kVocab, 4}));
  EXPECT_TRUE(torch::equal(weights.at("lm_head.lora_B.weight"), torch::zeros({kVocab, 4})));

  // model.lora_train keeps the biases and the norms' scales learning too.
  config::ModelConfig config = gpt_config(4);
  config.lora_train = "bias,norm";
  const std::shared_ptr<Model> kept = build(config);
  const auto kept_weights = by_name(*kept);
  EXPECT_TRUE(kept_weights.at("transformer.h.0.attn.c_attn.bias").requires_grad());
  EXPECT_TRUE(kept_weights.at("transformer.h.1.ln_2.weight").requires_grad());
  EXPECT_TRUE(kept_weights.at("transformer.ln_f.bias").requires_grad());
  EXPECT_FALSE(kept_weights.at("transformer.h.0.attn.c_attn.weight").requires_grad());
  EXPECT_FALSE(kept_weights.at("transformer.wte.weight").requires_grad());
}

TEST(LoraTest, RefusesOptionsThatDoNotFit) {
  const auto message = [](const config::ModelConfig& config) {
    try {
      build(config);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(message(gpt_config(4, "attn,qkv")).find("'qkv' names no layer"), std::string::npos);
  EXPECT_NE(message(gpt_config(17)).find("model.lora_rank=17 is larger than layer transformer.h.0.attn.c_attn"),
            std::string::npos);
  config::ModelConfig train = gpt_config(4);
  train.lora_train = "bias,everything";
  EXPECT_NE(message(train).find("model.lora_train: 'everything'"), std::string::npos);
  config::ModelConfig mlp;
  mlp.name = config::ModelName::kMlp;
  mlp.mlp_hidden = "8";
  mlp.lora_rank = 2;
  try {
    torch::manual_seed(1);
    make_model(mlp, {{4}, 3, false});
    ADD_FAILURE() << "an mlp took adapters";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.name=mlp takes no adapters"), std::string::npos) << e.what();
  }
}

TEST(LoraTest, MergedWeightsGiveTheAdaptedLogits) {
  const config::ModelConfig config = gpt_config(4, "attn,proj,fc,mlp_proj");
  const std::shared_ptr<Model> adapted = build(config);
  train_adapters(*adapted);
  adapted->module().eval();
  const at::Tensor expected = adapted->forward(tokens());

  const NamedWeights merged = merge_adapters(weights::all_weights(*adapted), lora_options(config).scale());
  const std::shared_ptr<Model> plain = build(gpt_config(0), /*seed=*/1234);
  auto targets = by_name(*plain);
  {
    const torch::NoGradGuard no_grad;
    std::size_t copied = 0;
    for (const auto& [name, tensor] : merged) {
      if (targets.count(name) == 0) continue;  // the tied head's second name
      targets.at(name).copy_(tensor);
      ++copied;
    }
    EXPECT_EQ(copied, targets.size());
  }
  for (const auto& [name, tensor] : merged) EXPECT_FALSE(is_adapter_parameter(name)) << name;
  plain->module().eval();
  const at::Tensor actual = plain->forward(tokens());
  const double relative = (actual - expected).norm().item<double>() / expected.norm().item<double>();
  EXPECT_LT(relative, 1e-5);
  EXPECT_GT((expected - build(gpt_config(0))->forward(tokens())).abs().max().item<double>(), 1e-3)
      << "the adapters should change the logits";
}

TEST(LoraTest, ACheckpointHoldsTheAdaptersAndTheBasesChecksums) {
  const std::shared_ptr<Model> model = build(gpt_config(2));
  const ckpt::NamedTensors state = weights::model_state(*model);
  for (const auto& [name, tensor] : state) EXPECT_TRUE(is_adapter_parameter(name)) << name;
  EXPECT_EQ(state.size(), 4u);
  const ckpt::NamedTensors checksums = weights::base_checksums(*model);
  EXPECT_EQ(checksums.size(), model->module().parameters().size() - 4);

  const std::string dir = (std::filesystem::temp_directory_path() / "hpctrain-lora-test").string();
  ckpt::Checkpoint checkpoint;
  checkpoint.meta.model_name = "gpt";
  checkpoint.groups["model"] = state;
  checkpoint.groups["base"] = checksums;
  const std::string path = ckpt::write_checkpoint(dir, checkpoint);
  const ckpt::CheckpointReader reader(path);
  EXPECT_NO_THROW(weights::check_base(reader, *model, "the seed"));

  // Another seed's base is refused, naming the first weight that differs.
  const std::shared_ptr<Model> other = build(gpt_config(2), /*seed=*/8);
  try {
    weights::check_base(reader, *other, "the seed 8");
    ADD_FAILURE() << "a changed base was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(the seed 8) is not the one the adapters of"), std::string::npos) << e.what();
  }
  hpctrain::sys::remove_tree(dir);
}

TEST(LoraTest, ABf16BaseHalvesItsMatricesAndComputesCloseToFloat32) {
  config::ModelConfig config = gpt_config(4, "attn,fc");
  const std::shared_ptr<Model> full = build(config);
  train_adapters(*full);
  config.lora_base_dtype = config::LoraBaseDtype::kBf16;
  const std::shared_ptr<Model> half = build(config);
  train_adapters(*half);
  for (const auto& [name, p] : by_name(*half)) {
    const bool matrix_of_the_base = !p.requires_grad() && p.dim() >= 2;
    EXPECT_EQ(p.scalar_type(), matrix_of_the_base ? torch::kBFloat16 : torch::kFloat) << name;
  }
  full->module().eval();
  half->module().eval();
  const at::Tensor expected = full->forward(tokens());
  const at::Tensor actual = half->forward(tokens());
  EXPECT_EQ(actual.scalar_type(), torch::kFloat);
  EXPECT_LT((actual - expected).norm().item<double>() / expected.norm().item<double>(), 2e-2);

  // Gradients reach the adapters alone, in float32.
  half->module().train();
  half->forward(tokens()).logsumexp(-1).mean().backward();
  for (const auto& [name, p] : by_name(*half)) {
    EXPECT_EQ(p.grad().defined(), is_adapter_parameter(name)) << name;
    if (p.grad().defined()) {
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat) << name;
    }
  }
}

}  // namespace
}  // namespace hpctrain::model

namespace hpctrain::model {
namespace {

// The output layer's product on a weight padded to a multiple of 64 rows gives the unpadded
// product's values and gradients (Note [Padded vocabulary]).
TEST(PaddedRowsLinear, GivesTheProductAndGradientsOfTheUnpaddedWeight) {
  torch::manual_seed(4);
  const at::Tensor x = torch::randn({2, 3, 16}, torch::requires_grad());
  const at::Tensor weight = torch::randn({50, 16}, torch::requires_grad());
  const at::Tensor padded = padded_rows_linear(x, weight, 64);
  ASSERT_EQ(padded.sizes(), (std::vector<std::int64_t>{2, 3, 50}));
  const at::Tensor plain = torch::linear(x, weight);
  EXPECT_TRUE(at::allclose(padded, plain, 1e-5, 1e-6));
  const at::Tensor upstream = torch::randn({2, 3, 50});
  const auto grads_of = [&](const at::Tensor& y) { return torch::autograd::grad({y}, {x, weight}, {upstream}); };
  const auto padded_grads = grads_of(padded);
  const auto plain_grads = grads_of(plain);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(padded_grads[i].sizes(), plain_grads[i].sizes());
    EXPECT_TRUE(at::allclose(padded_grads[i], plain_grads[i], 1e-5, 1e-6)) << i;
  }
  // A weight of a multiple of rows already is used as it is.
  const at::Tensor aligned = torch::randn({64, 16});
  EXPECT_TRUE(at::equal(padded_rows_linear(x.detach(), aligned, 64), torch::linear(x.detach(), aligned)));
}

}  // namespace
}  // namespace hpctrain::model
