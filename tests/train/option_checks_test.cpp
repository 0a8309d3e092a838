// The checks of options against one another (train/option_checks.h): each refusal names the
// options to change, and what is allowed passes. The e2e bad-input sweep runs them through the
// executable; these cover what it cannot reach here (an MPI without MPI_THREAD_MULTIPLE, a model
// whose parameters cannot be sharded).
#include "hpctrain/train/option_checks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/model/model.h"

namespace hpctrain::train {
namespace {

config::Config mlp_config(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> options{{"data.path", "/unused"}, {"model.name", "mlp"},
                                             {"model.mlp_hidden", "8"}};
  for (const auto& [key, value] : extra) options[key] = value;
  return config::resolve("", options);
}

// The message of the ConfigError `check` throws; "" when it throws none.
template <typename Check>
std::string refusal(Check check) {
  try {
    check();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A model with no blocks, as a TorchScript module is.
class BlocklessModel final : public model::Model {
 public:
  BlocklessModel() { layer_ = module_.register_module("layer", torch::nn::Linear(4, 2)); }
  at::Tensor forward(const at::Tensor& input) override { return layer_->forward(input); }
  torch::nn::Module& module() override { return module_; }

 private:
  torch::nn::Module module_;
  torch::nn::Linear layer_{nullptr};
};

TEST(OptionChecks, AsyncShardedCheckpointsNeedMpiThreadMultiple) {
  const config::Config sharded = mlp_config({{"ckpt.async", "true"}, {"dist.zero_stage", "1"}});
  const std::string refused = refusal([&] { check_mpi_threads(sharded, /*thread_multiple=*/false); });
  EXPECT_NE(refused.find("ckpt.async=true with dist.zero_stage=1"), std::string::npos) << refused;
  EXPECT_NE(refused.find("set ckpt.async=false"), std::string::npos) << refused;
  EXPECT_EQ(refusal([&] { check_mpi_threads(sharded, true); }), "");
  EXPECT_EQ(refusal([&] { check_mpi_threads(mlp_config({{"ckpt.async", "true"}}), false); }), "");
  EXPECT_EQ(refusal([&] { check_mpi_threads(mlp_config({{"dist.zero_stage", "1"}}), false); }), "");
}

TEST(OptionChecks, ShardingRefusesParametersItCannotShare) {
  const config::Config replicated = mlp_config();
  const config::Config sharded = mlp_config({{"dist.zero_stage", "1"}});
  const std::shared_ptr<model::Model> mlp = model::make_model(replicated.model, {{4}, 3});
  EXPECT_EQ(refusal([&] { check_model_options(sharded, *mlp); }), "");
  const auto named = mlp->module().named_parameters();
  const std::string name = named.begin()->key();
  {
    const torch::NoGradGuard no_grad;
    at::Tensor parameter = named.begin()->value();
    parameter.set_data(parameter.to(torch::kDouble));
  }
  const std::string refused = refusal([&] { check_model_options(sharded, *mlp); });
  EXPECT_NE(refused.find("dist.zero_stage=1 shards contiguous float32 parameters; '" + name + "' is Double"),
            std::string::npos)
      << refused;
  EXPECT_EQ(refusal([&] { check_model_options(replicated, *mlp); }), "");

  BlocklessModel blockless;
  EXPECT_EQ(refusal([&] { check_model_options(mlp_config({{"dist.zero_stage", "2"}}), blockless); }), "");
  const std::string stage3 = refusal([&] { check_model_options(mlp_config({{"dist.zero_stage", "3"}}), blockless); });
  EXPECT_NE(stage3.find("this model has no blocks: use dist.zero_stage=2"), std::string::npos) << stage3;
}

TEST(OptionChecks, LoraOptionsAreCheckedBeforeAModelIsBuilt) {
  const auto refused = [](const std::map<std::string, std::string>& options) {
    return refusal([&] { check_options(mlp_config(options), {false, 1, true}); });
  };
  const std::string mlp = refused({{"model.lora_rank", "4"}});
  EXPECT_NE(mlp.find("model.name=mlp takes no adapters"), std::string::npos) << mlp;
  const std::string targets =
      refused({{"model.name", "gpt"}, {"model.lora_rank", "4"}, {"model.lora_targets", "attn,wte"}});
  EXPECT_NE(targets.find("model.lora_targets: 'wte' names no layer of the gpt model"), std::string::npos) << targets;
  EXPECT_EQ(refused({{"model.name", "gpt"}, {"model.lora_rank", "4"}, {"model.lora_targets", "attn"}}), "");
}

TEST(OptionChecks, GlobalBatchIsCheckedAtTheLaunchedWorldSize) {
  const config::Config config = mlp_config({{"train.global_batch", "96"}, {"train.batch_size", "16"}});
  EXPECT_EQ(refusal([&] { check_options(config, {false, 3, true}); }), "");
  const std::string four = refusal([&] { check_options(config, {false, 4, true}); });
  EXPECT_NE(four.find("train.global_batch=96 is not a multiple of 4 rank(s) x train.batch_size=16"), std::string::npos)
      << four;
  EXPECT_EQ(refusal([&] { check_options(config, {false, 4, /*training=*/false}); }), "")
      << "an evaluation takes no step";
}

}  // namespace
}  // namespace hpctrain::train
