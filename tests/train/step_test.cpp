// Step on ranks played in one process (tests/support/fake_communicator.h): two ranks, each with
// its share of every micro-batch, take the step that one process takes on the whole global batch
// (Note [Masked mean]), padding and gradient accumulation included; a non-finite rank makes every
// rank skip alike.
#include "hpctrain/train/step.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "fake_communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/error.h"
#include "hpctrain/train/cuda_graph.h"
#include "hpctrain/train/option_checks.h"

namespace hpctrain::train {
namespace {

using testing::FakeCommunicator;
using testing::FakeWorld;
using testing::run_ranks;

config::Config step_config(const std::map<std::string, std::string>& extra = {}) {
  std::map<std::string, std::string> options{{"data.path", "/unused"},  {"model.name", "mlp"},
                                             {"model.mlp_hidden", "16"}, {"model.dropout", "0"},
                                             {"optim.name", "adamw"},   {"optim.clip_grad_norm", "0.5"}};
  for (const auto& [key, value] : extra) options[key] = value;
  return config::resolve("", options);
}

std::shared_ptr<model::Model> fresh_model(const config::Config& config) {
  torch::manual_seed(3);  // every rank builds the same model, as prepare_training does
  return model::make_model(config.model, {{6}, 4});
}

// Rows [first, first + count) of a global micro-batch of 8 samples whose samples from `real` on
// are padding: what one rank's sampler hands it.
data::Batch share(const at::Tensor& input, const at::Tensor& target, std::int64_t real, std::int64_t first,
                  std::int64_t count) {
  data::Batch batch;
  batch.input = input.narrow(0, first, count).clone();
  batch.target = target.narrow(0, first, count).clone();
  batch.weight = (torch::arange(first, first + count) < real).to(torch::kFloat);
  batch.real = std::max<std::int64_t>(0, std::min(real, first + count) - first);
  batch.global_real = real;
  return batch;
}

struct GlobalBatches {
  std::vector<at::Tensor> inputs;
  std::vector<at::Tensor> targets;
  std::vector<std::int64_t> real{8, 5};  // the second micro-batch ends in 3 padding slots

  GlobalBatches() {
    torch::manual_seed(11);
    for (int j = 0; j < 2; ++j) {
      inputs.push_back(torch::randn({8, 6}));
      targets.push_back(torch::randint(0, 4, {8}, torch::kLong));
    }
  }
  // Rank `rank` of `ranks`: its rows of both micro-batches.
  std::vector<data::Batch> of_rank(int rank, int ranks) const {
    const std::int64_t rows = 8 / ranks;
    return {share(inputs[0], targets[0], real[0], rank * rows, rows),
            share(inputs[1], targets[1], real[1], rank * rows, rows)};
  }
};

std::vector<at::Tensor> parameters_of(model::Model& model) {
  std::vector<at::Tensor> out;
  for (const auto& p : model.module().parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(Step, TwoRanksTakeTheStepOfOneProcessOnTheWholeBatch) {
  const config::Config config = step_config();
  const GlobalBatches data;
  const StepPlan plan{0.01, /*want_grad_norm=*/true};

  FakeWorld one(1);
  auto reference = fresh_model(config);
  StepResult whole;
  run_ranks(one, [&](FakeCommunicator& comm) {
    Step step(reference, config, comm, torch::kCPU);
    whole = step.run(data.of_rank(0, 1), plan);
  });

  FakeWorld two(2);
  std::vector<std::shared_ptr<model::Model>> models{fresh_model(config), fresh_model(config)};
  std::vector<StepResult> results(2);
  run_ranks(two, [&](FakeCommunicator& comm) {
    Step step(models[static_cast<size_t>(comm.rank())], config, comm, torch::kCPU);
    results[static_cast<size_t>(comm.rank())] = step.run(data.of_rank(comm.rank(), 2), plan);
    EXPECT_EQ(step.count(), 1);
  });

  ASSERT_TRUE(whole.finite && results[0].finite && results[1].finite);
  EXPECT_DOUBLE_EQ(results[0].samples + results[1].samples, 13.0);
  EXPECT_NEAR((results[0].loss_sum + results[1].loss_sum).item<double>(), whole.loss_sum.item<double>(), 1e-5);
  ASSERT_TRUE(whole.grad_norm && results[0].grad_norm && results[1].grad_norm);
  EXPECT_EQ(*results[0].grad_norm, *results[1].grad_norm);  // averaged gradients agree to the bit
  EXPECT_NEAR(*results[0].grad_norm, *whole.grad_norm, 1e-6);
  const std::vector<at::Tensor> expected = parameters_of(*reference);
  const std::vector<at::Tensor> rank0 = parameters_of(*models[0]);
  const std::vector<at::Tensor> rank1 = parameters_of(*models[1]);
  ASSERT_EQ(rank0.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(at::equal(rank0[i], rank1[i])) << "parameter " << i << ": the replicas differ";
    EXPECT_TRUE(at::allclose(rank0[i], expected[i], 1e-5, 1e-6)) << "parameter " << i;
    EXPECT_FALSE(at::equal(rank0[i], fresh_model(config)->module().parameters()[i])) << "parameter " << i;
  }
}

TEST(Step, ANonFiniteLossOnOneRankIsSkippedOnEveryRankAndNamed) {
  const config::Config config = step_config();
  GlobalBatches data;
  data.inputs[1][4][0] = std::nan("");  // a real sample of rank 1's share: its loss is NaN
  FakeWorld two(2);
  std::vector<std::shared_ptr<model::Model>> models{fresh_model(config), fresh_model(config)};
  const std::vector<at::Tensor> before = parameters_of(*models[0]);
  run_ranks(two, [&](FakeCommunicator& comm) {
    Step step(models[static_cast<size_t>(comm.rank())], config, comm, torch::kCPU);
    const StepResult result = step.run(data.of_rank(comm.rank(), 2), {0.01, true});
    EXPECT_FALSE(result.finite);
    EXPECT_EQ(result.action, optim::NonfiniteAction::kSkip);
    EXPECT_FALSE(result.grad_norm.has_value());
    EXPECT_EQ(step.count(), 1) << "a skipped step still counts";
    const std::string what = step.describe_nonfinite(result.loss_sum);  // collective
    EXPECT_NE(what.find("the loss was not finite on rank(s) 1"), std::string::npos) << what;
    const std::vector<at::Tensor> after = parameters_of(*models[static_cast<size_t>(comm.rank())]);
    for (size_t i = 0; i < after.size(); ++i) EXPECT_TRUE(at::equal(after[i], before[i])) << "parameter " << i;
  });
}

TEST(Step, WithNonfiniteAbortNothingIsAppliedOrCounted) {
  const config::Config config = step_config({{"train.nonfinite", "abort"}});
  GlobalBatches data;
  data.inputs[0][0][0] = std::numeric_limits<float>::infinity();
  FakeWorld two(2);
  std::vector<std::shared_ptr<model::Model>> models{fresh_model(config), fresh_model(config)};
  run_ranks(two, [&](FakeCommunicator& comm) {
    Step step(models[static_cast<size_t>(comm.rank())], config, comm, torch::kCPU);
    const StepResult result = step.run(data.of_rank(comm.rank(), 2), {0.01, false});
    EXPECT_EQ(result.action, optim::NonfiniteAction::kAbort);
    EXPECT_EQ(step.count(), 0);
    EXPECT_EQ(step.skipped().total(), 0) << "the checkpoint keeps the last good state's counts";
  });
}

}  // namespace
}  // namespace hpctrain::train

namespace hpctrain::train {
namespace {

TEST(Step, CudaGraphsAreRefusedWhereTheyCannotRunWithTheReason) {
  const auto reason = [](const std::map<std::string, std::string>& extra, int world, c10::Device device) {
    return cuda_graphs_refusal(step_config(extra), {device.is_cuda(), world, /*training=*/true});
  };
  if (!CapturedWork::available()) {
    EXPECT_NE(reason({}, 1, torch::kCUDA).find("built without CUDA graphs"), std::string::npos);
  } else {
    EXPECT_EQ(reason({}, 1, torch::kCUDA), "");
    EXPECT_NE(reason({}, 1, torch::kCPU).find("need a GPU"), std::string::npos);
    EXPECT_NE(reason({}, 2, torch::kCUDA).find("one rank"), std::string::npos);
    EXPECT_NE(reason({{"dist.zero_stage", "1"}}, 1, torch::kCUDA).find("dist.zero_stage"), std::string::npos);
    EXPECT_NE(reason({{"train.precision", "fp16"}}, 1, torch::kCUDA).find("fp16"), std::string::npos);
    EXPECT_NE(reason({{"train.loss_scale", "dynamic"}}, 1, torch::kCUDA).find("train.loss_scale"), std::string::npos);
  }
  // Step says which option to change.
  FakeWorld one(1);
  const config::Config config = step_config({{"train.cuda_graphs", "true"}});
  run_ranks(one, [&](FakeCommunicator& comm) {
    try {
      Step step(fresh_model(config), config, comm, torch::kCPU);
      ADD_FAILURE() << "train.cuda_graphs=true on the CPU was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("set train.cuda_graphs=false"), std::string::npos) << e.what();
    }
  });
}

// On a GPU, steps whose forward and backward replay a CUDA graph train exactly as eager steps do,
// two micro-batches a step (the graph accumulates into the gradients), and micro-batches of
// another size run eagerly beside them.
TEST(Step, CudaGraphStepsTrainAsEagerStepsDo) {
  if (!CapturedWork::available() || !torch::cuda::is_available()) GTEST_SKIP() << "no CUDA graphs or no GPU here";
  const c10::Device gpu(c10::kCUDA, 0);
  const auto micro_batch = [&](std::int64_t rows) {
    data::Batch batch = share(torch::randn({rows, 6}), torch::randint(0, 4, {rows}, torch::kLong), rows, 0, rows);
    batch.input = batch.input.to(gpu);
    batch.target = batch.target.to(gpu);
    batch.weight = batch.weight.to(gpu);
    return batch;
  };
  struct Trained {
    std::vector<at::Tensor> parameters;
    std::vector<double> losses;
    std::int64_t replays = 0;
  };
  const auto train = [&](bool graphs) {
    const config::Config config = step_config({{"train.cuda_graphs", graphs ? "true" : "false"},
                                               {"dist.device", "cuda"}});
    auto model = fresh_model(config);
    Trained out;
    FakeWorld one(1);
    run_ranks(one, [&](FakeCommunicator& comm) {
      Step step(model, config, comm, gpu);
      torch::manual_seed(5);
      for (int s = 0; s < 6; ++s) {
        const std::int64_t rows = s == 4 ? 3 : 4;  // the fifth step's micro-batches are smaller
        out.losses.push_back(step.run({micro_batch(rows), micro_batch(rows)}, {0.01, true}).loss_sum.item<double>());
      }
      out.replays = step.cuda_graph_replays();
    });
    out.parameters = parameters_of(*model);
    return out;
  };
  const Trained eager = train(false);
  const Trained graphed = train(true);
  // Step 2 captures its first micro-batch and replays its second; steps 3, 4 and 6 replay both.
  EXPECT_EQ(graphed.replays, 7);
  EXPECT_EQ(eager.replays, 0);
  for (size_t s = 0; s < eager.losses.size(); ++s) EXPECT_NEAR(graphed.losses[s], eager.losses[s], 1e-5) << s;
  for (size_t i = 0; i < eager.parameters.size(); ++i) {
    EXPECT_TRUE(at::allclose(graphed.parameters[i].cpu(), eager.parameters[i].cpu(), 1e-5, 1e-6)) << "parameter " << i;
  }
}

}  // namespace
}  // namespace hpctrain::train
