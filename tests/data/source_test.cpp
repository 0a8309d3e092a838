// Sources: what a sample split and a token stream give the training loop and evaluation — the
// sampler's plan, micro-batches carrying their weights and real-sample counts, augmented, and
// finished (normalized) where the model runs — and EpochReader's grouping into optimizer steps.
#include "hpctrain/data/source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>

#include "hpctrain/core/system.h"
#include "hpctrain/data/epoch_reader.h"
#include "hpctrain/data/importers.h"
#include "hpctrain/data/shard_writer.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;

// 10 images of 1x4x4 uint8, every pixel of image i = 20 i, label i % 3; and a token stream.
class SourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_source_" + std::to_string(::getpid()))).string();
    hpctrain::sys::remove_tree(dir_);
    fs::create_directories(dir_ + "/images");
    std::vector<std::uint8_t> x;
    std::vector<std::int64_t> y;
    for (int i = 0; i < 10; ++i) {
      x.insert(x.end(), 16, static_cast<std::uint8_t>(20 * i));
      y.push_back(i % 3);
    }
    Manifest m;
    m.name = "images";
    m.num_classes = 3;
    m.input_mean = 0.5;
    m.input_std = 0.25;
    m.fields = {{"image", io::DType::kUInt8, {1, 4, 4}}, {"label", io::DType::kInt64, {}}};
    m.splits["train"] = write_split(dir_ + "/images", "train", m.fields, {x.data(), y.data()}, 10, {});
    m.save(dir_ + "/images");
    std::ofstream(dir_ + "/text.txt") << std::string(200, 'a') + std::string(100, 'b');
    ImportOptions text;
    text.source = dir_ + "/text.txt";
    text.out = dir_ + "/tokens";
    text.test_fraction = 0.1;
    import_dataset("text", text);
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }

  std::shared_ptr<const Source> images(bool flip = false) const {
    SourceOptions options;
    options.split = "train";
    options.batch_size = 4;
    options.shuffle = false;
    options.augment.flip = flip;
    options.augment.seed = 7;
    return sample_source(Split::load(dir_ + "/images", "train"), options);
  }
  std::shared_ptr<const Source> tokens() const {
    SourceOptions options;
    options.split = "train";
    options.batch_size = 2;
    return token_source(TokenStream::load(dir_ + "/tokens", "train", 8), options);
  }
  std::string dir_;
};

TEST_F(SourceTest, ASampleMicroBatchCarriesItsWeightsAndItsRealSamples) {
  const auto source = images();
  EXPECT_EQ(source->describe(), "10 samples");
  EXPECT_EQ(source->items(), 10);
  EXPECT_FALSE(source->language_model());
  // 10 samples, 3 ranks x 4: one step of positions 0..11; rank 1 takes 1, 4, 7 and 10 (padding).
  const std::vector<SamplerStep> plan = source->sampler(3, 1)->steps(0, 0);
  ASSERT_EQ(plan.size(), 1u);
  const Batch batch = source->read(0, plan[0]);
  EXPECT_TRUE(at::equal(batch.weight, at::tensor(std::vector<float>{1, 1, 1, 0})));
  EXPECT_EQ(batch.real, 3);
  EXPECT_EQ(batch.global_real, 10);
  EXPECT_EQ(batch.input.scalar_type(), at::kByte) << "read as stored";
}

TEST_F(SourceTest, ReadAugmentsAsTheSampleDrawsAndFinishNormalizes) {
  const auto plain = images();
  const auto flipped = images(/*flip=*/true);
  const SamplerStep step = plain->sampler(1, 0)->steps(0, 0).front();
  const Batch raw = plain->read(0, step);
  Batch expected = raw;
  expected.input = raw.input.clone();
  AugmentOptions flip;
  flip.flip = true;
  flip.seed = 7;
  augment_in_place(expected.input, step.indices, 0, flip);
  EXPECT_TRUE(at::equal(flipped->read(0, step).input, expected.input));

  const Batch finished = plain->finish(raw, at::kCPU);
  EXPECT_EQ(finished.input.scalar_type(), at::kFloat);
  EXPECT_TRUE(at::allclose(finished.input, (raw.input.to(at::kFloat) / 255.0 - 0.5) / 0.25));
  EXPECT_TRUE(at::equal(finished.target, raw.target));
  EXPECT_TRUE(at::equal(finished.weight, raw.weight));
}

TEST_F(SourceTest, ATokenStreamReadsWindowsAndScoresThemEndToEnd) {
  const auto source = tokens();
  EXPECT_TRUE(source->language_model());
  EXPECT_EQ(source->tokens_per_item(), 8);
  const TokenStream stream = TokenStream::load(dir_ + "/tokens", "train", 8);
  EXPECT_EQ(source->items(), (stream.size() - 1) / 8);
  const Batch items = source->read_items(1, 2);
  EXPECT_TRUE(at::equal(items.input, stream.gather({8, 16}).input));
  const SamplerStep step = source->sampler(1, 0)->steps(0, 0).front();
  const Batch batch = source->read(0, step);
  EXPECT_EQ(batch.real, 2);
  EXPECT_TRUE(at::equal(batch.input, stream.gather(step.indices).input));
  EXPECT_TRUE(at::equal(source->finish(batch, at::kCPU).input, batch.input)) << "token ids as they are";
}

TEST_F(SourceTest, AnEpochReaderHandsOutOptimizerStepsOfMicroBatches) {
  const auto source = images();
  const auto sampler = source->sampler(1, 0);  // 10 samples, batch 4: 3 micro-batches
  EpochReader reader(source, *sampler, 0, 0, /*accumulation=*/2, {2, 1}, at::kCPU);
  EXPECT_EQ(reader.steps(), 2);
  const StepInput first = reader.next();
  ASSERT_EQ(first.micro_batches.size(), 2u);
  EXPECT_EQ(first.next_cursor, 8);
  EXPECT_EQ(first.micro_batches[0].input.scalar_type(), at::kFloat) << "finished";
  const StepInput last = reader.next();
  ASSERT_EQ(last.micro_batches.size(), 1u);
  EXPECT_EQ(last.next_cursor, 10);
  EXPECT_TRUE(reader.done());
  EpochReader resumed(source, *sampler, 0, 8, 2, {2, 1}, at::kCPU);  // from the cursor: the rest
  EXPECT_EQ(resumed.steps(), 1);
}

}  // namespace
}  // namespace hpctrain::data
