// The memory estimate's arithmetic and verdict (train/memory_check.h), and the probe's
// measurement of what an item takes, on a real model and split.
#include "hpctrain/train/memory_check.h"

#include <gtest/gtest.h>

#include <string>

#include "hpctrain/config/config.h"
#include "hpctrain/sharding/strategy.h"

namespace hpctrain::train {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

config::Config adamw_config(std::int64_t zero_stage) {
  config::Config config;
  config.optim.name = config::OptimizerName::kAdamW;
  config.dist.zero_stage = zero_stage;
  config.train.batch_size = 10;
  return config;
}

// Replicated: the gradients and both moments; ZeRO 1 shards the moments, 2 and 3 the gradients too.
TEST(MemoryCheck, ModelStateFollowsTheZeroStage) {
  constexpr std::int64_t kElements = 1000;
  constexpr std::int64_t kBytes = 4 * kElements;
  const auto state_bytes = [](const config::Config& config, int world_size) {
    return sharding::Strategy(config.dist).state_bytes(kElements, kBytes, config, world_size);
  };
  EXPECT_EQ(state_bytes(adamw_config(0), 4), kBytes + 2 * kBytes);
  EXPECT_EQ(state_bytes(adamw_config(1), 4), kBytes + 2 * kBytes / 4);
  EXPECT_EQ(state_bytes(adamw_config(2), 4), kBytes / 4 + 2 * kBytes / 4);
  EXPECT_EQ(state_bytes(adamw_config(3), 3), (kBytes + 2) / 3 + 2 * 4 * 334);
  config::Config sgd = adamw_config(0);
  sgd.optim.name = config::OptimizerName::kSgd;
  sgd.optim.momentum = 0;
  EXPECT_EQ(state_bytes(sgd, 4), kBytes);
  sgd.optim.momentum = 0.9;
  EXPECT_EQ(state_bytes(sgd, 4), 2 * kBytes);
  config::Config averaged = adamw_config(0);  // a moving average of the weights is sharded as the moments are
  averaged.train.ema_decay = 0.999;
  EXPECT_EQ(state_bytes(averaged, 4), kBytes + 2 * kBytes + kBytes);
  averaged.dist.zero_stage = 2;
  EXPECT_EQ(state_bytes(averaged, 4), kBytes / 4 + 2 * kBytes / 4 + kBytes / 4);
}

TEST(MemoryCheck, NeedCountsEveryMicroBatchReadAheadAndOneEvaluationBatch) {
  const config::Config config = adamw_config(0);  // batch 10
  const ItemBytes train{100, 400, 1000, 50};
  const ItemBytes eval{100, 400, 1000, 50};
  const MemoryNeed need = memory_need(config, train, /*read_ahead=*/2, /*accumulation=*/3, eval,
                                      /*eval_items=*/7, /*model_state=*/123, /*cache=*/456);
  EXPECT_EQ(need.batches, 3 * 10 * (3 * 100 + 400));
  EXPECT_EQ(need.activations, 10 * 1000);
  EXPECT_EQ(need.evaluation, 7 * (100 + 400 + 50));
  EXPECT_EQ(need.model_state, 123);
  EXPECT_EQ(need.cache, 456);
  EXPECT_EQ(need.total(), need.batches + need.activations + need.evaluation + 123 + 456);
}

TEST(MemoryCheck, ARunThatFitsIsNoProblem) {
  MemoryNeed need;
  need.activations = 100 * kMiB;
  EXPECT_EQ(memory_problem(need, 1000 * kMiB, 4, "n1"), "");
  EXPECT_EQ(memory_problem(need, 0, 4, "n1"), "") << "an unknown limit refuses nothing";
}

// The line names the host, the need of all its ranks, and the option of the largest part.
TEST(MemoryCheck, ARunThatCannotFitNamesTheOptionOfItsLargestPart) {
  MemoryNeed need;
  need.batches = 10 * kMiB;
  need.activations = 300 * kMiB;
  need.model_state = 20 * kMiB;
  const std::string line = memory_problem(need, 1000 * kMiB, 4, "n1");
  EXPECT_NE(line.find("330 MiB more memory per rank, 1.29 GiB for its 4 ranks on host n1"), std::string::npos)
      << line;
  EXPECT_NE(line.find("which has 1000 MiB available"), std::string::npos) << line;
  EXPECT_NE(line.find("the activations a forward keeps (300 MiB per rank): lower train.batch_size"),
            std::string::npos)
      << line;

  const auto remedy_of = [](MemoryNeed largest) { return memory_problem(largest, kMiB, 1, "h"); };
  MemoryNeed only;
  only.evaluation = 2 * kMiB;
  EXPECT_NE(remedy_of(only).find("lower train.eval_batch_size"), std::string::npos) << remedy_of(only);
  only = {};
  only.cache = 2 * kMiB;
  EXPECT_NE(remedy_of(only).find("lower data.cache_mb"), std::string::npos) << remedy_of(only);
  only = {};
  only.model_state = 2 * kMiB;
  EXPECT_NE(remedy_of(only).find("raise dist.zero_stage"), std::string::npos) << remedy_of(only);
  only = {};
  only.batches = 2 * kMiB;
  EXPECT_NE(remedy_of(only).find("lower train.batch_size or data.prefetch"), std::string::npos) << remedy_of(only);
}

}  // namespace
}  // namespace hpctrain::train
