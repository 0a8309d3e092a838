// dist.zero_stage 1, 2 and 3 on ranks played in one process (tests/support/fake_communicator.h):
// the steps of replicated training, bit for bit where both add the ranks' gradients in the same
// order (FakeWorld's collectives do), for SGD with Nesterov momentum and for AdamW with biases
// spared from decay, with gradient accumulation and buckets small enough that parameters straddle
// the ranks' chunks; clipping by the global norm within rounding; the optimizer state written in
// slices by every rank reads as a replicated run's, and loads at another world size and stage.
// Stage 3 (parameters gathered block by block) on mlp, gpt (tied embedding and head), fashion_cnn
// and resnet (BatchNorm, residual blocks), its parameters written in slices too.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "fake_communicator.h"
#include "hpctrain/ckpt/checkpoint.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/system.h"
#include "hpctrain/optim/train_state.h"
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/train/step.h"
#include "hpctrain/weights/model_weights.h"

namespace hpctrain::sharding {
namespace {

using testing::FakeCommunicator;
using testing::FakeWorld;
using testing::run_ranks;

constexpr std::int64_t kGlobalBatch = 12;  // divides among 1, 2, 3 and 4 ranks

config::Config sharded_config(const std::map<std::string, std::string>& extra) {
  // About 50 elements per bucket: the mlp's 284 parameters fall into several buckets, most
  // parameters cut between ranks, and the 4-element bias smaller than some chunks.
  std::map<std::string, std::string> options{{"data.path", "/unused"},   {"model.name", "mlp"},
                                             {"model.mlp_hidden", "16,8"}, {"model.dropout", "0"},
                                             {"dist.bucket_mb", "0.0002"}};
  for (const auto& [key, value] : extra) options[key] = value;
  return config::resolve("", options);
}

// What each model trains on here: 6 features (mlp), 1x28x28 images (fashion_cnn, resnet), 5 tokens (gpt).
model::ModelSpec spec_of(const config::Config& config) {
  if (config.model.name == config::ModelName::kGpt) return {{config.model.gpt_block_size}, 11, true};
  if (config.model.name == config::ModelName::kFashionCnn || config.model.name == config::ModelName::kResnet) {
    return {{1, 28, 28}, 4, false};
  }
  return {{6}, 4, false};
}

std::shared_ptr<model::Model> sharded_test_model(const config::Config& config) {
  torch::manual_seed(3);
  return model::make_model(config.model, spec_of(config));
}

// Every step's two micro-batches of kGlobalBatch samples for one spec.
struct Data {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  explicit Data(const model::ModelSpec& spec) {
    torch::manual_seed(100);
    std::vector<std::int64_t> shape{kGlobalBatch};
    shape.insert(shape.end(), spec.input_shape.begin(), spec.input_shape.end());
    for (int k = 0; k < 2 * 8; ++k) {
      inputs.push_back(spec.token_ids ? torch::randint(0, spec.num_classes, shape, torch::kLong) : torch::randn(shape));
      targets.push_back(torch::randint(0, spec.num_classes, spec.token_ids ? shape : std::vector<std::int64_t>{kGlobalBatch},
                                       torch::kLong));
    }
  }
};

// Drawn on first use, which train() makes before the ranks' threads start (they would race for
// the global generator and the map).
const Data& data_for(const model::ModelSpec& spec) {
  static std::map<std::vector<std::int64_t>, Data> drawn;
  auto found = drawn.find(spec.input_shape);
  if (found == drawn.end()) found = drawn.emplace(spec.input_shape, Data(spec)).first;
  return found->second;
}

// Step `step`'s micro-batches (steps 0 to 7); rank `rank` of `ranks` gets its rows.
std::vector<data::Batch> micro_batches(const config::Config& config, std::int64_t step, int rank, int ranks) {
  const Data& data = data_for(spec_of(config));
  std::vector<data::Batch> out;
  const std::int64_t rows = kGlobalBatch / ranks;
  for (int j = 0; j < 2; ++j) {
    const at::Tensor& input = data.inputs[static_cast<size_t>(2 * step + j)];
    const at::Tensor& target = data.targets[static_cast<size_t>(2 * step + j)];
    data::Batch batch;
    batch.input = input.narrow(0, rank * rows, rows).clone();
    batch.target = target.narrow(0, rank * rows, rows).clone();
    batch.weight = torch::ones({rows});
    batch.real = rows;
    batch.global_real = kGlobalBatch;
    out.push_back(batch);
  }
  return out;
}

std::vector<at::Tensor> cloned_parameters(model::Model& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.module().parameters()) out.push_back(p.detach().clone());
  return out;
}

struct Trained {
  std::vector<at::Tensor> parameters;          // rank 0's, after checking every rank holds the same
  std::vector<double> grad_norms;              // rank 0's, per step
  std::vector<ckpt::Checkpoint> optimizer;     // every rank's add_state after the last step
  std::vector<observe::HeldBytes> held;                 // every rank's
};

// Steps [first, first + steps) on `ranks` ranks; `before` runs on each rank's Step first (a resume).
Trained train(const config::Config& config, int ranks, std::int64_t first, std::int64_t steps,
              const std::function<void(train::Step&)>& before = {}) {
  micro_batches(config, 0, 0, 1);  // the data drawn here, not on the ranks' threads
  FakeWorld world(ranks);
  std::vector<std::shared_ptr<model::Model>> models;
  for (int r = 0; r < ranks; ++r) models.push_back(sharded_test_model(config));
  Trained out;
  out.optimizer.resize(static_cast<size_t>(ranks));
  out.held.resize(static_cast<size_t>(ranks));
  std::vector<std::vector<at::Tensor>> parameters(static_cast<size_t>(ranks));
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    train::Step step(models[r], config, comm, torch::kCPU);
    if (before) before(step);
    for (std::int64_t s = first; s < first + steps; ++s) {
      const train::StepResult result = step.run(micro_batches(config, s, comm.rank(), ranks), {0.05, true});
      EXPECT_TRUE(result.finite);
      if (r == 0 && result.grad_norm) out.grad_norms.push_back(*result.grad_norm);
    }
    step.update_state().add_state(out.optimizer[r]);
    out.held[r] = step.held_bytes();
    step.update_state().with_whole_parameters([&] { parameters[r] = cloned_parameters(*models[r]); });  // stage 3: gathered
  });
  out.parameters = parameters[0];
  for (size_t r = 1; r < parameters.size(); ++r) {
    for (size_t i = 0; i < parameters[r].size(); ++i) {
      EXPECT_TRUE(at::equal(parameters[r][i], out.parameters[i])) << "rank " << r;
    }
  }
  return out;
}

const std::map<std::string, std::map<std::string, std::string>> kOptimizers = {
    {"sgd", {{"optim.name", "sgd"}, {"optim.momentum", "0.9"}, {"optim.nesterov", "true"}, {"optim.weight_decay", "0.01"}}},
    {"adamw",
     {{"optim.name", "adamw"}, {"optim.weight_decay", "0.1"}, {"optim.decay_bias_and_norm", "false"}}},
};

TEST(ShardedUpdate, StagesOneAndTwoTakeTheStepsOfReplicatedTrainingBitForBit) {
  for (const auto& [optimizer, options] : kOptimizers) {
    for (const int ranks : {2, 3}) {
      const std::vector<at::Tensor> replicated = train(sharded_config(options), ranks, 0, 4).parameters;
      for (const char* stage : {"1", "2"}) {
        auto sharded_options = options;
        sharded_options["dist.zero_stage"] = stage;
        const std::vector<at::Tensor> sharded = train(sharded_config(sharded_options), ranks, 0, 4).parameters;
        ASSERT_EQ(sharded.size(), replicated.size());
        for (size_t i = 0; i < sharded.size(); ++i) {
          EXPECT_TRUE(at::equal(sharded[i], replicated[i]))
              << optimizer << ", " << ranks << " ranks, stage " << stage << ": parameter " << i << " differs by " << (sharded[i] - replicated[i]).abs().max().item<double>() << " of " << replicated[i].abs().max().item<double>();
        }
      }
    }
  }
}

std::map<std::string, std::string> with(std::map<std::string, std::string> options,
                                        const std::map<std::string, std::string>& more) {
  for (const auto& [key, value] : more) options[key] = value;
  return options;
}

const std::map<std::string, std::string> kGpt = {{"model.name", "gpt"},     {"model.gpt_layers", "2"},
                                                 {"model.gpt_heads", "2"},  {"model.gpt_embd", "8"},
                                                 {"model.gpt_block_size", "5"}};
const std::map<std::string, std::string> kFashionCnn = {{"model.name", "fashion_cnn"}};
const std::map<std::string, std::string> kResnet = {
    {"model.name", "resnet"}, {"model.resnet_depth", "8"}, {"model.resnet_width", "4"}};

// Each block's parameters gathered for its forward and again for its backward, the gradients
// reduce-scattered block by block, each rank stepping its chunks: the same numbers as stage 0.
TEST(ShardedUpdate, StageThreeTakesTheStepsOfReplicatedTrainingBitForBit) {
  const std::vector<std::pair<std::string, std::map<std::string, std::string>>> cases = {
      {"mlp, sgd", kOptimizers.at("sgd")},
      {"mlp, adamw", kOptimizers.at("adamw")},
      {"gpt, adamw", with(kOptimizers.at("adamw"), kGpt)},
      {"fashion_cnn, sgd", with(kOptimizers.at("sgd"), kFashionCnn)},
      {"resnet, adamw", with(kOptimizers.at("adamw"), kResnet)},
      // 25 MiB units: all of fashion_cnn's blocks are gathered as one.
      {"fashion_cnn, sgd, one unit", with(kOptimizers.at("sgd"), with(kFashionCnn, {{"dist.bucket_mb", "25"}}))}};
  for (const auto& [name, options] : cases) {
    for (const int ranks : {2, 3}) {
      const std::vector<at::Tensor> replicated = train(sharded_config(options), ranks, 0, 3).parameters;
      const std::vector<at::Tensor> sharded =
          train(sharded_config(with(options, {{"dist.zero_stage", "3"}})), ranks, 0, 3).parameters;
      ASSERT_EQ(sharded.size(), replicated.size());
      for (size_t i = 0; i < sharded.size(); ++i) {
        EXPECT_TRUE(at::equal(sharded[i], replicated[i])) << name << ", " << ranks << " ranks: parameter " << i;
      }
    }
  }
}

// bf16 on the wire: the reduce-scatter carries the same bf16 numbers the allreduce does.
TEST(ShardedUpdate, CompressedBucketsGiveTheStepsOfCompressedReplicatedTraining) {
  auto options = kOptimizers.at("adamw");
  options["dist.grad_compression"] = "bf16";
  const std::vector<at::Tensor> replicated = train(sharded_config(options), 3, 0, 3).parameters;
  for (const char* stage : {"1", "2"}) {
    options["dist.zero_stage"] = stage;
    const std::vector<at::Tensor> sharded = train(sharded_config(options), 3, 0, 3).parameters;
    for (size_t i = 0; i < sharded.size(); ++i) {
      EXPECT_TRUE(at::equal(sharded[i], replicated[i])) << "stage " << stage << ": parameter " << i;
    }
  }
}

// Each rank sees only its shards, yet every rank skips a step whose gradient is not finite on any
// of them, and the message names the loss's rank and a parameter.
TEST(ShardedUpdate, ANonFiniteGradientOnOneRankIsSkippedOnEveryRank) {
  auto options = kOptimizers.at("adamw");
  options["dist.zero_stage"] = "2";
  const config::Config config = sharded_config(options);
  FakeWorld world(3);
  std::vector<std::shared_ptr<model::Model>> models{sharded_test_model(config), sharded_test_model(config), sharded_test_model(config)};
  const std::vector<at::Tensor> before = cloned_parameters(*models[0]);
  micro_batches(config, 0, 0, 1);
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    train::Step step(models[r], config, comm, torch::kCPU);
    std::vector<data::Batch> batches = micro_batches(config, 0, comm.rank(), 3);
    if (comm.rank() == 2) batches[1].input[0][0] = std::nan("");
    const train::StepResult result = step.run(batches, {0.05, true});
    EXPECT_FALSE(result.finite);
    EXPECT_EQ(result.action, optim::NonfiniteAction::kSkip);
    const std::string what = step.describe_nonfinite(result.loss_sum);
    EXPECT_NE(what.find("the averaged gradient of '"), std::string::npos) << what;
    EXPECT_NE(what.find("the loss was not finite on rank(s) 2"), std::string::npos) << what;
    const std::vector<at::Tensor> after = cloned_parameters(*models[r]);
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(after[i], before[i])) << "parameter " << i;
  });
}

TEST(ShardedUpdate, ClippingByTheGlobalNormAgreesWithinRounding) {
  auto options = kOptimizers.at("adamw");
  options["optim.clip_grad_norm"] = "0.05";  // well below the norms: every step is clipped
  const Trained replicated = train(sharded_config(options), 3, 0, 4);
  options["dist.zero_stage"] = "2";
  const Trained sharded = train(sharded_config(options), 3, 0, 4);
  ASSERT_EQ(sharded.grad_norms.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_NEAR(sharded.grad_norms[s], replicated.grad_norms[s], 1e-6 * replicated.grad_norms[s]);
    EXPECT_GT(sharded.grad_norms[s], 0.05);
  }
  for (size_t i = 0; i < sharded.parameters.size(); ++i) {
    EXPECT_TRUE(at::allclose(sharded.parameters[i], replicated.parameters[i], 1e-5, 1e-6)) << "parameter " << i;
  }
}

TEST(ShardedUpdate, EachRankHoldsItsShareOfTheOptimizerStateAndStageTwoOfTheGradients) {
  auto options = kOptimizers.at("adamw");
  const Trained replicated = train(sharded_config(options), 4, 0, 1);
  options["dist.zero_stage"] = "1";
  const Trained one = train(sharded_config(options), 4, 0, 1);
  options["dist.zero_stage"] = "2";
  const Trained two = train(sharded_config(options), 4, 0, 1);
  options["dist.zero_stage"] = "3";
  const Trained three = train(sharded_config(options), 4, 0, 1);
  std::int64_t state_of_all_ranks = 0;
  for (const observe::HeldBytes& held : two.held) state_of_all_ranks += held.optimizer_state;
  EXPECT_EQ(state_of_all_ranks, replicated.held[0].optimizer_state) << "every element's moments, once";
  std::int64_t elements = 0;
  for (const auto& p : sharded_test_model(sharded_config(options))->module().parameters()) elements += p.numel();
  EXPECT_EQ(replicated.held[0].optimizer_state, elements * 8);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(one.held[r].parameters, replicated.held[r].parameters);
    EXPECT_LE(two.held[r].optimizer_state, replicated.held[r].optimizer_state / 4 + 8 * 8);
    EXPECT_GE(one.held[r].gradients, replicated.held[r].gradients) << "full (padded) buckets";
    EXPECT_LE(one.held[r].gradients, replicated.held[r].gradients + 8 * 4 * 4) << "the shards are in them";
    EXPECT_LE(two.held[r].gradients, replicated.held[r].gradients / 4 + 8 * 4 * 4) << "the shards only";
    EXPECT_LE(three.held[r].parameters, replicated.held[r].parameters / 4 + 3 * 4 * 4) << "a chunk of each block";
    EXPECT_LE(three.held[r].gradients, replicated.held[r].gradients / 4 + 3 * 4 * 4);
    EXPECT_LE(three.held[r].optimizer_state, replicated.held[r].optimizer_state / 4 + 3 * 8);
  }
}

// Rank 0 starts the file, ranks 1.. add their slices in turn, as the Checkpointer's writes do.
// `model`: what rank 0 stores of the model (at stage 3, the buffers alone).
std::string write_sharded(const std::string& dir, ckpt::NamedTensors model, std::vector<ckpt::Checkpoint> parts) {
  parts[0].meta.step = 4;
  parts[0].meta.model_name = "mlp";
  parts[0].groups["model"] = std::move(model);
  const std::string temp = ckpt::start_checkpoint(dir, parts[0]);
  for (size_t r = 1; r < parts.size(); ++r) ckpt::add_slices(temp, parts[r].slices);
  return ckpt::publish_checkpoint(dir, temp, 4);
}

// As Checkpointer::resume reads a checkpoint into a run's Step (at stage 3, the model whole).
void resume(train::Step& step, const ckpt::CheckpointReader& reader) {
  step.update_state().with_whole_parameters([&] { reader.read_into("model", weights::model_state(step.model())); });
  step.update_state().load_optimizer_state(reader);
}

TEST(ShardedUpdate, SlicesFromEveryRankReadAsAReplicatedCheckpointAndLoadAtAnyWorldSizeAndStage) {
  const std::string dir = (std::filesystem::temp_directory_path() / "hpctrain-sharded-update-test").string();
  sys::remove_tree(dir);
  auto options = kOptimizers.at("adamw");
  const Trained replicated = train(sharded_config(options), 3, 0, 4);
  options["dist.zero_stage"] = "2";
  const config::Config stage_two = sharded_config(options);
  const Trained sharded = train(stage_two, 3, 0, 4);
  auto model = sharded_test_model(stage_two);
  {
    std::vector<at::Tensor> trained = sharded.parameters;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < trained.size(); ++i) model->module().parameters()[i].copy_(trained[i]);
  }
  const std::string path = write_sharded(dir, weights::model_state(*model), sharded.optimizer);

  // The file holds what a replicated run holds, tensor for tensor.
  const ckpt::CheckpointReader reader(path);
  std::map<std::string, at::Tensor> stored;
  for (const auto& [name, tensor] : reader.read_group("optim")) stored[name] = tensor;
  const ckpt::NamedTensors expected = replicated.optimizer[0].groups.at("optim");
  ASSERT_EQ(stored.size(), expected.size());
  for (const auto& [name, tensor] : expected) {
    ASSERT_EQ(stored.count(name), 1u) << name;
    EXPECT_TRUE(at::equal(stored[name], tensor)) << name;
  }

  // Continued from it at stage 1 on 2 ranks and at stage 0 on 4, both as a run that never stopped
  // (another world size adds in another order: within rounding).
  const Trained uninterrupted = train(sharded_config(kOptimizers.at("adamw")), 3, 0, 6);
  for (const auto& [ranks, stage] : {std::pair<int, const char*>{2, "1"}, {4, "0"}, {3, "2"}, {2, "3"}}) {
    options["dist.zero_stage"] = stage;
    const Trained resumed = train(sharded_config(options), ranks, 4, 2, [&](train::Step& step) { resume(step, reader); });
    for (size_t i = 0; i < resumed.parameters.size(); ++i) {
      EXPECT_TRUE(at::allclose(resumed.parameters[i], uninterrupted.parameters[i], 1e-5, 1e-6))
          << ranks << " ranks, stage " << stage << ": parameter " << i;
      if (ranks == 3) {
        EXPECT_TRUE(at::equal(resumed.parameters[i], uninterrupted.parameters[i])) << "same world: bit for bit";
      }
    }
  }
  sys::remove_tree(dir);
}

// At stage 3 no rank holds a whole parameter: each writes its slices of the parameters too, and
// the file is a replicated run's; it continues at stage 0 on 4 ranks and at stage 3 on 3. BatchNorm
// normalizes over every rank's samples (dist.sync_bn), so another world size computes the same.
TEST(ShardedUpdate, StageThreeWritesTheParametersInSlicesAndTheRunContinuesAtAnyStage) {
  const std::string dir = (std::filesystem::temp_directory_path() / "hpctrain-stage-three-test").string();
  sys::remove_tree(dir);
  auto options = with(kOptimizers.at("sgd"), with(kFashionCnn, {{"dist.sync_bn", "true"}}));
  const Trained replicated = train(sharded_config(options), 3, 0, 4);
  const config::Config stage_three = sharded_config(with(options, {{"dist.zero_stage", "3"}}));
  const Trained sharded = train(stage_three, 3, 0, 4);
  for (const ckpt::Checkpoint& part : sharded.optimizer) EXPECT_EQ(part.groups.count("model"), 0u);
  auto model = sharded_test_model(stage_three);  // BatchNorm's statistics are not compared here
  const std::string path = write_sharded(dir, weights::model_buffers(*model), sharded.optimizer);

  const ckpt::CheckpointReader reader(path);
  std::map<std::string, at::Tensor> stored;
  for (const auto& [name, tensor] : reader.read_group("model")) stored[name] = tensor;
  size_t i = 0;
  for (const auto& p : model->module().named_parameters()) {
    ASSERT_EQ(stored.count(p.key()), 1u) << p.key();
    EXPECT_TRUE(at::equal(stored[p.key()], replicated.parameters[i++])) << p.key();
  }
  std::map<std::string, at::Tensor> optim;
  for (const auto& [name, tensor] : reader.read_group("optim")) optim[name] = tensor;
  for (const auto& [name, tensor] : replicated.optimizer[0].groups.at("optim")) {
    EXPECT_TRUE(at::equal(optim[name], tensor)) << name;
  }

  const Trained uninterrupted = train(sharded_config(options), 3, 0, 6);
  for (const auto& [ranks, stage] : {std::pair<int, const char*>{4, "0"}, {3, "3"}}) {
    const Trained resumed = train(sharded_config(with(options, {{"dist.zero_stage", stage}})), ranks, 4, 2,
                                  [&](train::Step& step) { resume(step, reader); });
    for (size_t k = 0; k < resumed.parameters.size(); ++k) {
      EXPECT_TRUE(at::allclose(resumed.parameters[k], uninterrupted.parameters[k], 1e-5, 1e-6))
          << ranks << " ranks, stage " << stage << ": parameter " << k;
      if (ranks == 3) {
        EXPECT_TRUE(at::equal(resumed.parameters[k], uninterrupted.parameters[k])) << "same world";
      }
    }
  }
  sys::remove_tree(dir);
}

// Note [Sharded checkpoints]: a rank that cannot write its part ends every rank with its error,
// and nothing is published. Here rank 0 cannot start the file: checkpoints/ is a regular file.
TEST(ShardedUpdate, AFailedShardedWriteEndsEveryRankWithTheFailingRanksError) {
  const std::string root = (std::filesystem::temp_directory_path() / "hpctrain-sharded-write-test").string();
  sys::remove_tree(root);
  std::filesystem::create_directories(root);
  std::ofstream(root + "/checkpoints") << "not a directory\n";
  auto options = kOptimizers.at("adamw");
  options["dist.zero_stage"] = "2";
  const config::Config config = sharded_config(options);
  FakeWorld world(3);
  std::vector<std::shared_ptr<model::Model>> models{sharded_test_model(config), sharded_test_model(config), sharded_test_model(config)};
  std::vector<std::string> errors(3);
  micro_batches(config, 0, 0, 1);
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    train::Step step(models[r], config, comm, torch::kCPU);
    step.run(micro_batches(config, 0, comm.rank(), 3), {0.05, false});
    train::Checkpointer checkpointer(config, comm, runtime::RunDirectory(root), torch::kCPU);
    try {
      checkpointer.save(step, {1, 0, 0}, {});
    } catch (const CheckpointError& e) {
      errors[r] = e.what();
    }
  });
  for (const std::string& error : errors) {
    EXPECT_EQ(error.rfind("rank 0: writing checkpoint " + root + "/checkpoints/ckpt-1.h5", 0), 0u) << error;
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(root + "/checkpoints"));
  sys::remove_tree(root);
}

}  // namespace
}  // namespace hpctrain::sharding
