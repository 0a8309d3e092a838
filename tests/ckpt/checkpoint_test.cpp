#include "hpctrain/ckpt/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

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

Checkpoint model_only(NamedTensors model, CheckpointMeta meta = {}) {
  Checkpoint out;
  out.meta = std::move(meta);
  out.groups["model"] = std::move(model);
  return out;
}

TEST_F(CheckpointTest, RoundTripsTensorsAndMetadataAndUpdatesLatest) {
  const NamedTensors saved = sample_state();
  CheckpointMeta meta;
  meta.step = 120;
  meta.epoch = 2;
  meta.cursor = 640;
  meta.world_size = 3;
  meta.model_name = "mlp";
  meta.config_text = "[train]\nepochs = 2\n";
  meta.hpctrain_version = "test";
  const std::string path = write_checkpoint(dir_, model_only(saved, meta));
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
  EXPECT_EQ(read.cursor, 640);
  EXPECT_EQ(read.world_size, 3);
  EXPECT_EQ(read.model_name, "mlp");
  EXPECT_EQ(read.config_text, meta.config_text);
  for (size_t i = 0; i < saved.size(); ++i) {
    EXPECT_TRUE(at::equal(saved[i].second, loaded[i].second)) << saved[i].first;
  }
}

TEST_F(CheckpointTest, HostCopyIsContiguousAndOwnsItsMemory) {
  Checkpoint original = model_only({{"fc.weight", at::randn({3, 4}).t()}, {"step", at::full({}, 5, at::kLong)}});
  original.meta.step = 9;
  HostStaging staging;
  const Checkpoint copy = staging.copy(original);
  EXPECT_EQ(copy.meta.step, 9);
  const at::Tensor& weight = copy.groups.at("model")[0].second;
  EXPECT_TRUE(weight.is_contiguous());
  const at::Tensor before = original.groups.at("model")[0].second.clone();
  original.groups.at("model")[0].second.add_(1.0);  // training goes on
  original.groups.at("model")[1].second.fill_(6);
  EXPECT_TRUE(at::equal(weight, before));
  EXPECT_EQ(copy.groups.at("model")[1].second.item<std::int64_t>(), 5);
  EXPECT_EQ(checkpoint_path(dir_, 9), write_checkpoint(dir_, copy));
}

// A GPU's tensors land in pinned host memory kept for the next copy, which holds the new values;
// a tensor of another shape gets memory of its own.
TEST_F(CheckpointTest, HostStagingKeepsPinnedMemoryForAGpusTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  Checkpoint original = model_only({{"fc.weight", at::randn({3, 4}, at::kCUDA).t()}});
  HostStaging staging;
  const Checkpoint first = staging.copy(original);
  const at::Tensor& kept = first.groups.at("model")[0].second;
  EXPECT_TRUE(kept.is_pinned());
  EXPECT_TRUE(at::equal(kept, original.groups.at("model")[0].second.cpu()));
  original.groups.at("model")[0].second.add_(1.0);
  const Checkpoint next = staging.copy(original);
  EXPECT_EQ(next.groups.at("model")[0].second.data_ptr(), kept.data_ptr());
  EXPECT_TRUE(at::equal(next.groups.at("model")[0].second, original.groups.at("model")[0].second.cpu()));
  original.groups.at("model")[0].second = at::randn({5}, at::kCUDA);
  EXPECT_EQ(staging.copy(original).groups.at("model")[0].second.sizes(), at::IntArrayRef({5}));
}

TEST_F(CheckpointTest, MismatchedModelNamesEveryDifference) {
  const std::string path = write_checkpoint(dir_, model_only(sample_state()));
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
  const std::string path = write_checkpoint(dir_, model_only(sample_state()));
  NamedTensors wrong = {{"fc.weight", at::zeros({5, 3})}, {"fc.bias", at::zeros({4})},
                        {"bn.num_batches_tracked", at::zeros({}, at::kLong)}};
  try {
    read_checkpoint(path, wrong);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("model/fc.weight is float32[4,3] in the checkpoint but "
                                         "float32[5,3] here"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(CheckpointTest, TruncatedFileIsACheckpointError) {
  const std::string path = write_checkpoint(dir_, model_only(sample_state()));
  fs::resize_file(path, fs::file_size(path) / 2);
  NamedTensors state = sample_state();
  try {
    read_checkpoint(path, state);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kCheckpoint) << e.what();
  }
}

TEST_F(CheckpointTest, EveryGroupRoundTripsWithNestedNamesAndDtypes) {
  Checkpoint saved = model_only(sample_state());
  saved.groups["optim"] = {{"fc.weight/exp_avg", at::randn({4, 3})}, {"fc.weight/step", at::full({}, 9, at::kLong)}};
  saved.groups["rng"] = {{"rank-0/cpu", at::randint(0, 255, {5056}, at::kByte)},
                         {"rank-1/cpu", at::randint(0, 255, {5056}, at::kByte)}};
  saved.groups["metrics"] = {{"best_test_acc", at::full({}, 0.91, at::kDouble)}};
  const CheckpointReader reader(write_checkpoint(dir_, saved));
  EXPECT_EQ(reader.meta().format_version, kFormatVersion);
  EXPECT_TRUE(reader.has_group("rng"));
  EXPECT_FALSE(reader.has_group("sched"));
  EXPECT_TRUE(reader.read_group("sched").empty());
  for (const char* group : {"optim", "rng", "metrics"}) {
    const NamedTensors read = reader.read_group(group);
    ASSERT_EQ(read.size(), saved.groups[group].size()) << group;
    for (const auto& [name, tensor] : saved.groups[group]) {
      const std::string& wanted = name;  // C++17 lambdas cannot capture a structured binding
      const auto found = std::find_if(read.begin(), read.end(), [&](const auto& r) { return r.first == wanted; });
      ASSERT_NE(found, read.end()) << name;
      EXPECT_EQ(found->second.scalar_type(), tensor.scalar_type()) << name;
      EXPECT_TRUE(at::equal(found->second, tensor)) << name;
    }
  }
  EXPECT_EQ(reader.verify(), 3 + 2 + 2 + 1);
}

TEST_F(CheckpointTest, NewestFirstAndPruningKeepsTheNewestAndTheBest) {
  for (const std::int64_t step : {5, 40, 100, 7}) {
    CheckpointMeta meta;
    meta.step = step;
    write_checkpoint(dir_, model_only(sample_state(), meta));
  }
  EXPECT_EQ(fs::path(latest_checkpoint(dir_)).filename(), "ckpt-7.h5") << "the last written";
  std::vector<std::string> names;
  for (const auto& path : list_checkpoints(dir_)) names.push_back(fs::path(path).filename().string());
  EXPECT_EQ(names, (std::vector<std::string>{"ckpt-100.h5", "ckpt-40.h5", "ckpt-7.h5", "ckpt-5.h5"}));
  mark_best(dir_, dir_ + "/ckpt-5.h5");
  EXPECT_EQ(best_checkpoint(dir_), dir_ + "/ckpt-5.h5");
  prune_checkpoints(dir_, 2);
  EXPECT_EQ(list_checkpoints(dir_).size(), 3u);
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-100.h5"));
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-40.h5"));
  EXPECT_TRUE(fs::exists(dir_ + "/ckpt-5.h5")) << "the best is spared";
}

TEST(StoredScalar, OneValueOfTheRightKindOrAnErrorNamingIt) {
  EXPECT_EQ(stored_count(at::full({}, 7, at::kLong), "count"), 7);
  EXPECT_EQ(stored_count(at::full({1}, 3, at::kByte), "count"), 3);
  EXPECT_DOUBLE_EQ(stored_double(at::full({}, 0.5, at::kDouble), "best"), 0.5);
  EXPECT_DOUBLE_EQ(stored_double(at::full({}, 2, at::kLong), "best"), 2.0);
  for (const at::Tensor& bad : {at::full({}, 1.5, at::kDouble), at::zeros({2}, at::kLong), at::zeros({0}, at::kLong),
                                 at::full({}, -1, at::kLong)}) {
    try {
      stored_count(bad, "the count x");
      FAIL() << bad;
    } catch (const CheckpointError& e) {
      EXPECT_EQ(std::string(e.what()), "the count x is not a single non-negative integer");
    }
  }
  EXPECT_THROW(stored_double(at::zeros({2}), "best"), CheckpointError);
}

TEST_F(CheckpointTest, FlippedBytesFailVerificationAndOtherFilesAreRefused) {
  NamedTensors big = {{"w", at::randn({256, 256})}};
  const std::string path = write_checkpoint(dir_, model_only(big));
  {  // Flip a byte in the middle of the 256 KiB tensor.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(fs::file_size(path) / 2));
    const char byte = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(fs::file_size(path) / 2));
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  EXPECT_THROW(CheckpointReader(path).verify(), CheckpointError);
  const std::string text = dir_ + "/notes.h5";
  std::ofstream(text) << "not hdf5";
  EXPECT_THROW(CheckpointReader{text}, CheckpointError);
  try {
    CheckpointReader missing(dir_ + "/nope.h5");
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("no such checkpoint file"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::ckpt
