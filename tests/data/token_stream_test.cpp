// Token streams for language models: the window sampler's properties, and windows read from text
// prepared with the text importer equal the text's bytes, across shard boundaries, from memory or
// per window, through a multi-threaded Loader.
#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "hpctrain/core/error.h"
#include "hpctrain/data/batch_pool.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/importers.h"
#include "hpctrain/data/loader.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/data/token_stream.h"
#include "hpctrain/data/token_windows.h"

namespace hpctrain::data {
namespace {

namespace fs = std::filesystem;

TokenWindowOptions window_options(int world_size, int rank) {
  TokenWindowOptions o;
  o.stream_tokens = 1000;
  o.block_size = 16;
  o.world_size = world_size;
  o.rank = rank;
  o.batch_size = 3;
  o.seed = 5;
  return o;
}

TEST(TokenWindows, OffsetsFitTheStreamAndDependOnSeedAndEpoch) {
  const TokenWindowSampler sampler(window_options(1, 0));
  EXPECT_EQ(sampler.windows_per_epoch(), 999 / 16);
  std::set<std::int64_t> distinct;
  for (std::int64_t p = 0; p < 5000; ++p) {
    const std::int64_t offset = sampler.offset(0, p);
    ASSERT_GE(offset, 0);
    ASSERT_LE(offset + 16 + 1, 1000) << "window " << p << " runs past the stream";
    distinct.insert(offset);
  }
  EXPECT_GT(distinct.size(), 900u) << "offsets should cover nearly every start";
  EXPECT_TRUE(distinct.count(0) && distinct.count(1000 - 17)) << "the first and last start occur";

  const auto epoch0 = sampler.rank_offsets(0, 0);
  EXPECT_EQ(epoch0, TokenWindowSampler(window_options(1, 0)).rank_offsets(0, 0)) << "same seed, same windows";
  EXPECT_NE(epoch0, sampler.rank_offsets(1, 0)) << "epochs differ";
  TokenWindowOptions other_seed = window_options(1, 0);
  other_seed.seed = 6;
  EXPECT_NE(epoch0, TokenWindowSampler(other_seed).rank_offsets(0, 0)) << "seeds differ";
}

// The windows of an epoch, by position, as W ranks draw them from `cursor` on.
std::vector<std::int64_t> windows_by_position(int world_size, std::int64_t epoch, std::int64_t cursor) {
  std::vector<std::int64_t> out;
  for (int r = 0; r < world_size; ++r) {
    const TokenWindowSampler sampler(window_options(world_size, r));
    std::int64_t position = cursor;
    for (const SamplerStep& step : sampler.steps(epoch, cursor)) {
      EXPECT_EQ(step.indices.size(), 3u) << "every step is full";
      for (size_t k = 0; k < step.indices.size(); ++k) {
        const auto p = static_cast<size_t>(position + r + static_cast<std::int64_t>(k) * world_size - cursor);
        if (out.size() <= p) out.resize(p + 1, -1);
        out[p] = step.indices[k];
      }
      position = step.next_cursor;
    }
  }
  return out;
}

TEST(TokenWindows, EveryWorldSizeDrawsTheSameWindowsAndAResumeContinuesThem) {
  const std::vector<std::int64_t> one = windows_by_position(1, 2, 0);
  ASSERT_GE(static_cast<std::int64_t>(one.size()), 999 / 16);
  for (int w = 2; w <= 5; ++w) {
    const std::vector<std::int64_t> many = windows_by_position(w, 2, 0);
    for (size_t p = 0; p < static_cast<size_t>(999 / 16); ++p) ASSERT_EQ(many[p], one[p]) << "W " << w << " p " << p;
  }
  // Stopped after 4 steps at W = 2 (cursor 24), resumed at W' = 3: the windows from 24 on are
  // those an uninterrupted run draws there.
  const std::vector<std::int64_t> resumed = windows_by_position(3, 2, 24);
  for (size_t p = 0; p + 24 < static_cast<size_t>(999 / 16); ++p) ASSERT_EQ(resumed[p], one[p + 24]) << p;
  EXPECT_EQ(TokenWindowSampler(window_options(3, 0)).steps_from(999 / 16), 0);
}

TEST(TokenWindows, AStreamShorterThanOneWindowIsADataError) {
  TokenWindowOptions o = window_options(1, 0);
  o.stream_tokens = 16;
  EXPECT_THROW(TokenWindowSampler{o}, DataError);
}

class TokenStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("hpctrain_tokens_" + std::to_string(::getpid()));
    hpctrain::sys::remove_tree(root_);
    fs::create_directories(root_);
    for (int i = 0; i < 300; ++i) text_ += static_cast<char>('!' + (i * 7) % 90);
    std::ofstream(root_ / "text.txt") << text_;
    ImportOptions o;
    o.source = (root_ / "text.txt").string();
    o.out = (root_ / "data").string();
    o.test_fraction = 0.1;
    o.sharding.shards = 4;  // 270 training tokens: windows span shard boundaries
    import_dataset("text", o);
  }
  void TearDown() override { hpctrain::sys::remove_tree(root_); }
  fs::path root_;
  std::string text_;
};

TEST_F(TokenStreamTest, WindowsAreTheTextShiftedByOneAcrossShardsInMemoryOrNot) {
  for (const std::int64_t cache : {std::int64_t{1} << 20, std::int64_t{1}}) {
    const TokenStream stream = TokenStream::load((root_ / "data").string(), "train", 10, cache);
    EXPECT_EQ(stream.in_memory(), cache > 1);
    EXPECT_EQ(stream.size(), 270);
    const std::vector<std::int64_t> offsets{0, 259, 60, 61, 130, 5};
    const Batch batch = stream.gather(offsets);
    ASSERT_EQ(batch.input.sizes(), (std::vector<std::int64_t>{6, 10}));
    ASSERT_EQ(batch.target.sizes(), (std::vector<std::int64_t>{6, 10}));
    for (size_t b = 0; b < offsets.size(); ++b) {
      for (std::int64_t t = 0; t < 10; ++t) {
        const auto at = static_cast<size_t>(offsets[b] + t);
        ASSERT_EQ(batch.input[b][t].item<std::int64_t>(), static_cast<unsigned char>(text_[at]));
        ASSERT_EQ(batch.target[b][t].item<std::int64_t>(), static_cast<unsigned char>(text_[at + 1]));
      }
    }
    EXPECT_THROW(stream.gather({260}), DataError) << "260 + 11 tokens run past the stream";
    EXPECT_THROW(stream.gather({-1}), DataError);
  }
}

// Note [Batch memory]: a batch dropped lends its memory to the next, which holds its own windows.
TEST_F(TokenStreamTest, ABatchDroppedLendsItsMemoryToTheNext) {
  const TokenStream stream = TokenStream::load((root_ / "data").string(), "train", 10);
  Batch first = stream.gather({0, 1});
  const std::set<const void*> lent{first.input.data_ptr(), first.target.data_ptr()};
  first = {};
  EXPECT_EQ(stream.batch_memory().buffers_held(), 2);
  const Batch second = stream.gather({100, 7});
  EXPECT_EQ((std::set<const void*>{second.input.data_ptr(), second.target.data_ptr()}), lent);
  EXPECT_EQ(stream.batch_memory().buffers_allocated(), 2);
  EXPECT_EQ(second.input[0][0].item<std::int64_t>(), static_cast<unsigned char>(text_[100]));
  EXPECT_EQ(second.target[1][9].item<std::int64_t>(), static_cast<unsigned char>(text_[17]));
}

TEST_F(TokenStreamTest, TwoLoaderThreadsDeliverTheSamplersWindowsInOrder) {
  for (const std::int64_t cache : {std::int64_t{1} << 20, std::int64_t{1}}) {
    const TokenStream stream = TokenStream::load((root_ / "data").string(), "train", 8, cache);
    TokenWindowOptions o;
    o.stream_tokens = stream.size();
    o.block_size = 8;
    o.world_size = 2;
    o.rank = 1;
    o.batch_size = 4;
    const TokenWindowSampler sampler(o);
    std::vector<std::vector<std::int64_t>> steps;
    for (const SamplerStep& step : sampler.steps(0, 0)) steps.push_back(step.indices);
    Loader loader([&](const std::vector<std::int64_t>& offsets) { return stream.gather(offsets); }, steps,
                  {3, 2});
    for (const auto& offsets : steps) {
      const Batch batch = loader.next();
      for (size_t b = 0; b < offsets.size(); ++b) {
        ASSERT_EQ(batch.input[b][0].item<std::int64_t>(), static_cast<unsigned char>(text_[offsets[b]]));
      }
    }
  }
}

TEST_F(TokenStreamTest, ASampleDatasetIsNotATokenStream) {
  const std::string dir = (root_ / "samples").string();
  fs::create_directories(dir);
  const std::vector<float> x{1, 2, 3, 4};
  const std::vector<std::int64_t> y{0, 1};
  Manifest m;
  m.name = "pairs";
  m.num_classes = 2;
  m.fields = {{"input", io::DType::kFloat32, {2}}, {"label", io::DType::kInt64, {}}};
  m.splits["train"] = write_split(dir, "train", m.fields, {x.data(), y.data()}, 2, ShardingOptions{});
  m.save(dir);
  EXPECT_FALSE(is_token_stream(m));
  try {
    TokenStream::load(dir, "train", 1);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("'pairs' is not a token stream"), std::string::npos) << e.what();
  }
}

// A token outside the vocabulary would index past the model's embedding on one rank only: it is
// a DataError at load (a stream held in memory) or when its window is read (one that is not).
TEST_F(TokenStreamTest, ATokenOutsideTheVocabularyIsADataError) {
  const std::string dir = (root_ / "vocabulary").string();
  fs::create_directories(dir);
  std::vector<std::uint16_t> tokens(64, 3);
  tokens[40] = 9;
  Manifest m;
  m.name = "small-vocabulary";
  m.num_classes = 5;
  m.fields = {{"tokens", io::DType::kUInt16, {}}};
  m.splits["train"] = write_split(dir, "train", m.fields, {tokens.data()}, 64, ShardingOptions{});
  m.save(dir);
  const std::string expected = "holds token 9 at 40, outside its vocabulary [0, 5)";
  try {
    TokenStream::load(dir, "train", 8);
    FAIL() << "a stream in memory is checked when loaded";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  const TokenStream per_window = TokenStream::load(dir, "train", 8, /*cache_bytes=*/0);
  EXPECT_NO_THROW(per_window.gather({0, 20}));
  try {
    per_window.gather({36});
    FAIL() << "a window is checked when read";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::data
