// dist.zero_stage 1 and 2 on ranks played in one process (tests/support/fake_communicator.h):
// the steps of replicated training, bit for bit where both add the ranks' gradients in the same
// order (FakeWorld's collectives do), for SGD with Nesterov momentum and for AdamW with biases
// spared from decay, with gradient accumulation and buckets small enough that parameters straddle
// the ranks' chunks; clipping by the global norm within rounding; the optimizer state written in
// slices by every rank reads as a replicated run's, and loads at another world size and stage.
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
#include "hpctrain/train/checkpointer.h"
#include "hpctrain/train/step.h"
#include "hpctrain/train/train_state.h"

namespace hpctrain::train {
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

std::shared_ptr<model::Model> fresh_model(const config::Config& config) {
  torch::manual_seed(3);
  return model::make_model(config.model, {{6}, 4});
}

// Every step's two micro-batches of kGlobalBatch samples, drawn before the ranks' threads start
// (they would race for the global generator).
struct Data {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  Data() {
    torch::manual_seed(100);
    for (int k = 0; k < 2 * 8; ++k) {
      inputs.push_back(torch::randn({kGlobalBatch, 6}));
      targets.push_back(torch::randint(0, 4, {kGlobalBatch}, torch::kLong));
    }
  }
};

// Step `step`'s micro-batches (steps 0 to 7); rank `rank` of `ranks` gets its rows.
std::vector<data::Batch> micro_batches(std::int64_t step, int rank, int ranks) {
  static const Data data;
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

std::vector<at::Tensor> parameters_of(model::Model& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.module().parameters()) out.push_back(p.detach().clone());
  return out;
}

struct Trained {
  std::vector<at::Tensor> parameters;          // rank 0's, after checking every rank holds the same
  std::vector<double> grad_norms;              // rank 0's, per step
  std::vector<ckpt::Checkpoint> optimizer;     // every rank's add_optimizer_state after the last step
  std::vector<HeldBytes> held;                 // every rank's
};

// Steps [first, first + steps) on `ranks` ranks; `before` runs on each rank's Step first (a resume).
Trained train(const config::Config& config, int ranks, std::int64_t first, std::int64_t steps,
              const std::function<void(Step&)>& before = {}) {
  micro_batches(0, 0, 1);  // the data drawn here, not on the ranks' threads
  FakeWorld world(ranks);
  std::vector<std::shared_ptr<model::Model>> models;
  for (int r = 0; r < ranks; ++r) models.push_back(fresh_model(config));
  Trained out;
  out.optimizer.resize(static_cast<size_t>(ranks));
  out.held.resize(static_cast<size_t>(ranks));
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    Step step(models[r], config, comm, torch::kCPU);
    if (before) before(step);
    for (std::int64_t s = first; s < first + steps; ++s) {
      const StepResult result = step.run(micro_batches(s, comm.rank(), ranks), {0.05, true});
      EXPECT_TRUE(result.finite);
      if (r == 0 && result.grad_norm) out.grad_norms.push_back(*result.grad_norm);
    }
    step.update().add_optimizer_state(out.optimizer[r]);
    out.held[r] = step.held_bytes();
  });
  out.parameters = parameters_of(*models[0]);
  for (int r = 1; r < ranks; ++r) {
    const std::vector<at::Tensor> other = parameters_of(*models[static_cast<size_t>(r)]);
    for (size_t i = 0; i < other.size(); ++i) EXPECT_TRUE(at::equal(other[i], out.parameters[i])) << "rank " << r;
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
  std::vector<std::shared_ptr<model::Model>> models{fresh_model(config), fresh_model(config), fresh_model(config)};
  const std::vector<at::Tensor> before = parameters_of(*models[0]);
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    Step step(models[r], config, comm, torch::kCPU);
    std::vector<data::Batch> batches = micro_batches(0, comm.rank(), 3);
    if (comm.rank() == 2) batches[1].input[0][0] = std::nan("");
    const StepResult result = step.run(batches, {0.05, true});
    EXPECT_FALSE(result.finite);
    EXPECT_EQ(result.action, NonfiniteAction::kSkip);
    const std::string what = step.describe_nonfinite(result.loss_sum);
    EXPECT_NE(what.find("the averaged gradient of '"), std::string::npos) << what;
    EXPECT_NE(what.find("the loss was not finite on rank(s) 2"), std::string::npos) << what;
    const std::vector<at::Tensor> after = parameters_of(*models[r]);
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
  std::int64_t state_of_all_ranks = 0;
  for (const HeldBytes& held : two.held) state_of_all_ranks += held.optimizer_state;
  EXPECT_EQ(state_of_all_ranks, replicated.held[0].optimizer_state) << "every element's moments, once";
  std::int64_t elements = 0;
  for (const auto& p : fresh_model(sharded_config(options))->module().parameters()) elements += p.numel();
  EXPECT_EQ(replicated.held[0].optimizer_state, elements * 8);
  for (size_t r = 0; r < 4; ++r) {
    EXPECT_EQ(one.held[r].parameters, replicated.held[r].parameters);
    EXPECT_LE(two.held[r].optimizer_state, replicated.held[r].optimizer_state / 4 + 8 * 8);
    EXPECT_GE(one.held[r].gradients, replicated.held[r].gradients) << "full (padded) buckets";
    EXPECT_LE(one.held[r].gradients, replicated.held[r].gradients + 8 * 4 * 4) << "the shards are in them";
    EXPECT_LE(two.held[r].gradients, replicated.held[r].gradients / 4 + 8 * 4 * 4) << "the shards only";
  }
}

// Rank 0 starts the file, ranks 1.. add their slices in turn, as Checkpointer::save_sharded does.
std::string write_sharded(const std::string& dir, model::Model& model, std::vector<ckpt::Checkpoint> parts) {
  parts[0].meta.step = 4;
  parts[0].meta.model_name = "mlp";
  parts[0].groups["model"] = model_state(model);
  const std::string temp = ckpt::start_checkpoint(dir, parts[0]);
  for (size_t r = 1; r < parts.size(); ++r) ckpt::add_slices(temp, parts[r].slices);
  return ckpt::publish_checkpoint(dir, temp, 4);
}

TEST(ShardedUpdate, SlicesFromEveryRankReadAsAReplicatedCheckpointAndLoadAtAnyWorldSizeAndStage) {
  const std::string dir = (std::filesystem::temp_directory_path() / "hpctrain-sharded-update-test").string();
  sys::remove_tree(dir);
  auto options = kOptimizers.at("adamw");
  const Trained replicated = train(sharded_config(options), 3, 0, 4);
  options["dist.zero_stage"] = "2";
  const config::Config stage_two = sharded_config(options);
  const Trained sharded = train(stage_two, 3, 0, 4);
  auto model = fresh_model(stage_two);
  {
    std::vector<at::Tensor> trained = sharded.parameters;
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < trained.size(); ++i) model->module().parameters()[i].copy_(trained[i]);
  }
  const std::string path = write_sharded(dir, *model, sharded.optimizer);

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
  for (const auto& [ranks, stage] : {std::pair<int, const char*>{2, "1"}, {4, "0"}, {3, "2"}}) {
    options["dist.zero_stage"] = stage;
    const Trained resumed = train(sharded_config(options), ranks, 4, 2, [&](Step& step) {
      reader.read_into("model", model_state(step.model()));
      step.update().load_optimizer_state(reader);
    });
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
  std::vector<std::shared_ptr<model::Model>> models{fresh_model(config), fresh_model(config), fresh_model(config)};
  std::vector<std::string> errors(3);
  run_ranks(world, [&](FakeCommunicator& comm) {
    const auto r = static_cast<size_t>(comm.rank());
    Step step(models[r], config, comm, torch::kCPU);
    step.run(micro_batches(0, comm.rank(), 3), {0.05, false});
    Checkpointer checkpointer(config, comm, RunDirectory(root), torch::kCPU);
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
}  // namespace hpctrain::train
