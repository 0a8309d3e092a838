#include "hpctrain/ckpt/checkpoint.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"

namespace hpctrain::ckpt {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_ckpt_" + std::to_string(::getpid()))).string();
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }
  std::string dir_;
};

NamedTensors sample_state() {
  return {{"fc.weight", at::randn({4, 3})}, {"fc.bias", at::randn({4})},
          {"bn.num_batches_tracked", at::full({}, 17, at::kLong)}};
}

TEST_F(CheckpointTest, RoundTripsTensorsAndMetadataAndUpdatesLatest) {
  const NamedTensors saved = sample_state();
  CheckpointMeta meta;
  meta.step = 120;
  meta.epoch = 2;
  meta.world_size = 3;
  meta.model_name = "mlp";
  meta.config_text = "[train]\nepochs = 2\n";
  meta.hpctrain_version = "test";
  const std::string path = write_checkpoint(dir_, saved, meta);
  EXPECT_EQ(fs::path(path).filename(), "ckpt-120.h5");
  EXPECT_EQ(latest_checkpoint(dir_), path);
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().string().find(".tmp"), std::string::npos) << entry.path();
  }

  NamedTensors loaded = {{"fc.weight", at::zeros({4, 3})}, {"fc.bias", at::zeros({4})},
                         {"bn.num_batches_tracked", at::zeros({}, at::kLong)}};
  const CheckpointMeta read = read_checkpoint(path, loaded);
  EXPECT_EQ(read.step, 120);
  EXPECT_EQ(read.epoch, 2);
  EXPECT_EQ(read.world_size, 3);
  EXPECT_EQ(read.model_name, "mlp");
  EXPECT_EQ(read.config_text, meta.config_text);
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_TRUE(at::equal(saved[i].second, loaded[i].second)) << saved[i].first;
  }
}

TEST_F(CheckpointTest, MismatchedModelNamesEveryDifference) {
  const std::string path = write_checkpoint(dir_, sample_state(), {});
  NamedTensors other = {{"fc.weight", at::zeros({4, 3})}, {"head.bias", at::zeros({4})},
                        {"bn.num_batches_tracked", at::zeros({}, at::kLong)}};
  try {
    read_checkpoint(path, other);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("missing head.bias"), std::string::npos) << message;
    EXPECT_NE(message.find("unexpected fc.bias"), std::string::npos) << message;
  }
}

TEST_F(CheckpointTest, MismatchedShapeIsNamed) {
  const std::string path = write_checkpoint(dir_, sample_state(), {});
  NamedTensors wrong = {{"fc.weight", at::zeros({5, 3})}, {"fc.bias", at::zeros({4})},
                        {"bn.num_batches_tracked", at::zeros({}, at::kLong)}};
  try {
    read_checkpoint(path, wrong);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("fc.weight is float32[4,3] in the checkpoint but "
                                         "float32[5,3] in the model"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, TruncatedFileIsACheckpointError) {
  const std::string path = write_checkpoint(dir_, sample_state(), {});
  fs::resize_file(path, fs::file_size(path) / 2);
  NamedTensors state = sample_state();
  try {
    read_checkpoint(path, state);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::ckpt
