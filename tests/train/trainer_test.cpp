// A Trainer on a rank played in one process (tests/support/fake_communicator.h): the loop reads,
// steps and follows its policy to the end, leaving the run directory a real run leaves.
#include "hpctrain/train/trainer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "fake_communicator.h"
#include "hpctrain/config/parser.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/shard_writer.h"

namespace hpctrain::train {
namespace {

namespace fs = std::filesystem;
using testing::FakeCommunicator;
using testing::FakeWorld;

// 16 training and 8 test images of 1x4x4 uint8; label 1 for the bright ones.
void write_dataset(const std::string& dir) {
  data::Manifest m;
  m.name = "bright";
  m.num_classes = 2;
  m.fields = {{"image", io::DType::kUInt8, {1, 4, 4}}, {"label", io::DType::kInt64, {}}};
  for (const auto& [split, samples] : {std::pair<const char*, int>{"train", 16}, {"test", 8}}) {
    std::vector<std::uint8_t> x;
    std::vector<std::int64_t> y;
    for (int i = 0; i < samples; ++i) {
      x.insert(x.end(), 16, static_cast<std::uint8_t>(i % 2 == 0 ? 10 + i : 200 + i));
      y.push_back(i % 2);
    }
    m.splits[split] = data::write_split(dir, split, m.fields, {x.data(), y.data()}, samples, {});
  }
  m.save(dir);
}

TEST(Trainer, RunsOnAFakeRankToTheEndAndLeavesRecordsAndCheckpoints) {
  const std::string root = (fs::temp_directory_path() / ("hpctrain_trainer_" + std::to_string(::getpid()))).string();
  hpctrain::sys::remove_tree(root);
  fs::create_directories(root + "/data");
  write_dataset(root + "/data");
  const config::Config config = config::resolve(
      "", {{"data.path", root + "/data"}, {"run.dir", root + "/run"}, {"model.name", "mlp"},
           {"model.mlp_hidden", "8"}, {"train.batch_size", "4"}, {"train.epochs", "2"}, {"train.threads", "1"},
           {"log.every_steps", "2"}, {"ckpt.every_steps", "3"}, {"ckpt.keep_last", "0"}, {"ckpt.signals", ""}});
  TrainingSetup setup = prepare_training(config, /*need_train_split=*/true);
  const runtime::RunDirectory run_dir(config.run.dir);
  run_dir.create();
  FakeWorld world(1);
  FakeCommunicator comm(world, 0);
  Trainer trainer(std::move(setup), comm, comm, at::kCPU, run_dir);
  const TrainSummary summary = trainer.run();

  EXPECT_EQ(summary.steps, 8);  // 16 samples / 4, two epochs
  EXPECT_FALSE(summary.stopped);
  EXPECT_TRUE(summary.failure.empty());
  ASSERT_TRUE(summary.last_eval.has_value());
  EXPECT_EQ(summary.last_eval->samples, 8);
  for (const int step : {3, 6, 8}) {
    EXPECT_TRUE(fs::exists(run_dir.checkpoints_dir() + "/ckpt-" + std::to_string(step) + ".h5")) << step;
  }
  EXPECT_EQ(summary.checkpoint, run_dir.checkpoints_dir() + "/ckpt-8.h5");
  std::ifstream metrics(run_dir.metrics_path());
  std::string line;
  int progress = 0;
  int evaluations = 0;
  while (std::getline(metrics, line)) {
    progress += line.find("\"samples_per_s\"") != std::string::npos ? 1 : 0;
    evaluations += line.find("\"test_acc\"") != std::string::npos ? 1 : 0;
  }
  EXPECT_EQ(progress, 4) << "steps 2, 4, 6, 8";
  EXPECT_EQ(evaluations, 2) << "one per epoch";
  EXPECT_TRUE(fs::exists(run_dir.config_path()));
  hpctrain::sys::remove_tree(root);
}

}  // namespace
}  // namespace hpctrain::train
