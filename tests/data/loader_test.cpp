// Split reads from shards and the prefetching Loader: batches must equal the sampler's order.
#include "hpctrain/data/loader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include "hpctrain/core/error.h"
#include "hpctrain/data/batch_pool.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/data/split.h"
#include "hpctrain/io/h5_file.h"
#include "hpctrain/core/system.h"

namespace hpctrain::data {
namespace {

Batch batch_of(at::Tensor input, at::Tensor target) {
  Batch batch;
  batch.input = std::move(input);
  batch.target = std::move(target);
  return batch;
}

namespace fs = std::filesystem;

// 50 samples of float32[2] = (i, -i), label i % 5, in 4 shards.
class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_loader_" + std::to_string(::getpid()))).string();
    hpctrain::sys::remove_tree(dir_);
    fs::create_directories(dir_);
    std::vector<float> x;
    std::vector<std::int64_t> y;
    for (int i = 0; i < 50; ++i) {
      x.push_back(static_cast<float>(i));
      x.push_back(static_cast<float>(-i));
      y.push_back(i % 5);
    }
    Manifest m;
    m.name = "toy";
    m.num_classes = 5;
    m.fields = {{"input", io::DType::kFloat32, {2}}, {"label", io::DType::kInt64, {}}};
    ShardingOptions sharding;
    sharding.shards = 4;
    m.splits["train"] = write_split(dir_, "train", m.fields, {x.data(), y.data()}, 50, sharding);
    m.save(dir_);
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }
  std::string dir_;
};

// Both cache sizes (Note [Block cache]): the split held in memory, and a budget (here 1 byte) too
// small for it, where one block at a time is held.
constexpr std::int64_t kFits = std::int64_t{256} << 20;
constexpr std::int64_t kTooSmall = 1;

TEST_F(LoaderTest, GatherReturnsSamplesInBatchOrderAcrossShardsAndRepeats) {
  for (const auto& [cache, access] : {std::pair{kFits, ShardAccess::kRead}, std::pair{kTooSmall, ShardAccess::kRead},
                                      std::pair{kFits, ShardAccess::kMap}, std::pair{kTooSmall, ShardAccess::kMap}}) {
    const Split split = Split::load(dir_, "train", cache, access);
    EXPECT_EQ(split.caches_blocks(), cache == kFits);
    // Shards of 12 and 13 samples are one chunk each, smaller than a block: mapped whole.
    EXPECT_EQ(split.maps_files(), access == ShardAccess::kMap);
    EXPECT_EQ(split.why_not_mapped(), "");
    EXPECT_EQ(split.size(), 50);
    const std::vector<std::int64_t> indices{49, 0, 12, 13, 14, 37, 12, 25};
    const Batch batch = split.gather(indices);
    for (size_t k = 0; k < indices.size(); ++k) {
      EXPECT_EQ(batch.input[static_cast<std::int64_t>(k)][0].item<float>(), static_cast<float>(indices[k]));
      EXPECT_EQ(batch.input[static_cast<std::int64_t>(k)][1].item<float>(), -static_cast<float>(indices[k]));
      EXPECT_EQ(batch.target[static_cast<std::int64_t>(k)].item<std::int64_t>(), indices[k] % 5);
    }
    EXPECT_TRUE(at::equal(split.range(10, 5).target, at::tensor({0, 1, 2, 3, 4}, at::kLong)));
    EXPECT_THROW(split.gather({50}), DataError);
    EXPECT_THROW(split.gather({-1}), DataError);
  }
}

// Note [Batch memory]: a batch the loop dropped lends its memory to the next one of its size.
TEST_F(LoaderTest, ABatchDroppedLendsItsMemoryToTheNext) {
  const Split split = Split::load(dir_, "train");
  Batch first = split.gather({3, 4, 5});
  // Three samples of two floats and three labels: 24 bytes each, so either may take either.
  const std::set<const void*> lent{first.input.data_ptr(), first.target.data_ptr()};
  first = {};
  EXPECT_EQ(split.batch_memory().buffers_held(), 2);
  const Batch second = split.gather({40, 2, 17});
  EXPECT_EQ((std::set<const void*>{second.input.data_ptr(), second.target.data_ptr()}), lent);
  EXPECT_EQ(split.batch_memory().buffers_allocated(), 2);
  EXPECT_EQ(split.batch_memory().buffers_held(), 0);
  EXPECT_EQ(second.input[0][0].item<float>(), 40.0f);
  EXPECT_TRUE(at::equal(second.target, at::tensor({0, 2, 2}, at::kLong)));
}

// Rows of 256 KiB make blocks of 4 rows (one chunk each, about 1 MiB in memory), so shards of 12
// and 13 rows span several blocks each, the last one partial: 3 + 4 + 3 + 4 = 14 blocks.
constexpr std::int64_t kWidth = 65536;
constexpr std::int64_t kWideSamples = 50;

class WideSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = (fs::temp_directory_path() / ("hpctrain_blocks_" + std::to_string(::getpid()))).string();
    hpctrain::sys::remove_tree(dir_);
    fs::create_directories(dir_);
    std::vector<float> x(static_cast<size_t>(kWideSamples * kWidth));
    std::vector<std::int64_t> y;
    for (std::int64_t i = 0; i < kWideSamples; ++i) {
      x[static_cast<size_t>(i * kWidth)] = static_cast<float>(i);
      x[static_cast<size_t>(i * kWidth + kWidth - 1)] = static_cast<float>(-i);
      y.push_back(i % 7);
    }
    manifest_.name = "wide";
    manifest_.num_classes = 7;
    manifest_.fields = {{"input", io::DType::kFloat32, {kWidth}}, {"label", io::DType::kInt64, {}}};
    ShardingOptions sharding;
    sharding.shards = 4;
    manifest_.splits["train"] = write_split(dir_, "train", manifest_.fields, {x.data(), y.data()}, kWideSamples, sharding);
    manifest_.save(dir_);
  }
  void TearDown() override { hpctrain::sys::remove_tree(dir_); }

  // Reads the sampler's epoch through a Loader and checks every sample of every batch.
  static void read_epoch(const Split& split, const DistributedSampler& sampler, const LoaderOptions& loader_options) {
    std::vector<std::vector<std::int64_t>> steps;
    for (const SamplerStep& step : sampler.steps(sampler.global_order(0), 0)) steps.push_back(step.indices);
    Loader loader(split, steps, loader_options);
    for (const auto& indices : steps) {
      const Batch batch = loader.next();
      for (size_t k = 0; k < indices.size(); ++k) {
        const auto row = static_cast<std::int64_t>(k);
        ASSERT_EQ(batch.input[row][0].item<float>(), static_cast<float>(indices[k]));
        ASSERT_EQ(batch.input[row][kWidth - 1].item<float>(), -static_cast<float>(indices[k]));
        ASSERT_EQ(batch.target[row].item<std::int64_t>(), indices[k] % 7);
      }
    }
  }

  std::string dir_;
  Manifest manifest_;
};

TEST_F(WideSplit, RowsComeFromTheRightBlockOfTheRightShard) {
  const Split split = Split::load(dir_, "train", kFits);
  ASSERT_TRUE(split.caches_blocks());
  std::vector<std::int64_t> indices(kWideSamples);
  for (std::int64_t i = 0; i < kWideSamples; ++i) indices[static_cast<size_t>(i)] = (i * 17) % kWideSamples;
  const Batch batch = split.gather(indices);
  for (std::int64_t k = 0; k < kWideSamples; ++k) {
    const std::int64_t i = indices[static_cast<size_t>(k)];
    ASSERT_EQ(batch.input[k][0].item<float>(), static_cast<float>(i)) << k;
    ASSERT_EQ(batch.input[k][kWidth - 1].item<float>(), static_cast<float>(-i)) << k;
    ASSERT_EQ(batch.target[k].item<std::int64_t>(), i % 7) << k;
  }
  EXPECT_EQ(split.blocks_read(), 14);
}

// A split larger than its cache (6 MiB: 5 blocks): shuffled by chunks in windows of 3 MiB (2
// blocks), one epoch reads each of the 14 blocks once; a global shuffle keeps reading them again.
TEST_F(WideSplit, ShufflingByChunksReadsEachBlockOncePerEpochWithinTheCache) {
  constexpr std::int64_t kCache = std::int64_t{6} << 20;
  SamplerOptions options;
  options.dataset_size = kWideSamples;
  options.batch_size = 4;
  options.seed = 3;
  const DistributedSampler global(options);
  set_shuffle_window(manifest_, "train", 3, options);
  EXPECT_EQ(options.block_starts, (std::vector<std::int64_t>{0, 4, 8, 12, 16, 20, 24, 25, 29, 33, 37, 41, 45, 49}));
  EXPECT_EQ(options.window_blocks, 2);
  const DistributedSampler by_chunks(options);

  const Split split = Split::load(dir_, "train", kCache, ShardAccess::kRead);
  ASSERT_FALSE(split.caches_blocks());
  EXPECT_EQ(split.blocks_held_at_most(), 5);
  read_epoch(split, by_chunks, {0, 1});
  EXPECT_EQ(split.blocks_read(), 14);

  const Split again = Split::load(dir_, "train", kCache, ShardAccess::kRead);
  read_epoch(again, global, {0, 1});
  EXPECT_GT(again.blocks_read(), 2 * 14);

  // A cache that cannot hold two windows is refused (2 MiB: one block; windows of one block).
  SamplerOptions small_window = options;
  set_shuffle_window(manifest_, "train", 1, small_window);
  EXPECT_EQ(small_window.window_blocks, 1);
  EXPECT_THROW(check_shuffle_window(Split::load(dir_, "train", std::int64_t{2} << 20, ShardAccess::kRead), small_window), ConfigError);
  EXPECT_NO_THROW(check_shuffle_window(Split::load(dir_, "train", std::int64_t{3} << 20, ShardAccess::kRead), small_window));
  EXPECT_NO_THROW(check_shuffle_window(split, options));

  // Two threads reading ahead: the same samples, whatever the order blocks are evicted in.
  const Split threaded = Split::load(dir_, "train", kCache, ShardAccess::kRead);
  read_epoch(threaded, by_chunks, {3, 2});
}

// Note [Mapped shards]: mapped, the blocks are the files' chunks and only their labels take cache
// room, so a cache of 1 KiB holds the whole split (50 labels) and a global shuffle reads each of
// the 14 blocks once; the rows are those of the files, read or mapped, at any thread count.
TEST_F(WideSplit, MappedShardsServeAGlobalShuffleFromTheFiles) {
  SamplerOptions options;
  options.dataset_size = kWideSamples;
  options.batch_size = 4;
  options.seed = 5;
  const DistributedSampler global(options);
  const Split split = Split::load(dir_, "train", std::int64_t{1} << 10, ShardAccess::kMap);
  ASSERT_TRUE(split.maps_files()) << split.why_not_mapped();
  EXPECT_EQ(split.input_bytes(), kWideSamples * kWidth * 4);
  EXPECT_TRUE(split.caches_blocks());
  EXPECT_EQ(split.block_cache_bytes(), 4 * 8);
  read_epoch(split, global, {4, 2});
  EXPECT_EQ(split.blocks_read(), 14);

  // One block's labels at a time (32 bytes): evicted blocks are checked again when read again.
  const Split tight = Split::load(dir_, "train", 40, ShardAccess::kMap);
  ASSERT_TRUE(tight.maps_files());
  EXPECT_FALSE(tight.caches_blocks());
  EXPECT_EQ(tight.blocks_held_at_most(), 1);
  read_epoch(tight, global, {1, 1});
  EXPECT_GT(tight.blocks_read(), 14);

  // Read into memory, the same budget holds one block of 4 rows of 256 KiB at most.
  const Split read = Split::load(dir_, "train", std::int64_t{1} << 10, ShardAccess::kRead);
  EXPECT_FALSE(read.maps_files());
  EXPECT_EQ(read.why_not_mapped(), "");
  read_epoch(read, global, {1, 1});
  EXPECT_GT(read.blocks_read(), 2 * 14);
}

// A mapped block is checked against its stored checksum when first read: a flipped byte inside
// shard 1's second chunk (rows 4-7 of the shard, samples 16-19 of the split) is named.
TEST_F(WideSplit, AMappedChunkThatFailsItsChecksumIsNamed) {
  const std::string shard = dir_ + "/train-00001.h5";
  std::int64_t at = 0;
  {
    const io::H5File file = io::H5File::open_read(shard, ExitCode::kData);
    const std::vector<std::int64_t> offsets = file.open_dataset("input", 0).raw_chunk_offsets();
    ASSERT_EQ(offsets.size(), 4U);
    at = offsets[1] + 1000;
  }
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(at);
    const char was = static_cast<char>(f.get());
    f.seekp(at);
    f.put(static_cast<char>(was ^ 0x10));
  }
  const Split split = Split::load(dir_, "train", kFits, ShardAccess::kMap);
  ASSERT_TRUE(split.maps_files());
  EXPECT_NO_THROW(split.gather({12, 15, 20}));
  try {
    split.gather({3, 17});
    FAIL() << "a damaged chunk was read";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ExitCode::kData);
    EXPECT_NE(std::string(e.what()).find(shard + ": dataset 'input': rows 4-7 fail their fletcher32 checksum"),
              std::string::npos)
        << e.what();
  }
}

// A shard behind a user block (here 512 bytes put in front of it; HDF5 finds its superblock there)
// is read, not mapped: HDF5 versions disagree on whether the chunk addresses they give count it.
TEST_F(WideSplit, AShardWithAUserBlockIsReadNotMapped) {
  const std::string shard = dir_ + "/train-00002.h5";
  {
    std::ifstream in(shard, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(shard, std::ios::binary | std::ios::trunc);
    out << std::string(512, '\0') << bytes;
  }
  const Split split = Split::load(dir_, "train", kFits, ShardAccess::kMap);
  EXPECT_FALSE(split.maps_files());
  EXPECT_NE(split.why_not_mapped().find(shard + ": field 'input': the file starts with a user block of 512 bytes"),
            std::string::npos)
      << split.why_not_mapped();
  const Batch batch = split.gather({30, 2});  // shard 2 holds samples 25-36
  EXPECT_EQ(batch.input[0][0].item<float>(), 30.0f);
  EXPECT_EQ(batch.input[1][kWidth - 1].item<float>(), -2.0f);
}

// Splits whose stored chunks are not the rows as trained are read, and the split says why.
TEST(MappedSplit, CompressedOrWidenedFieldsAreReadInstead) {
  const std::string dir = (fs::temp_directory_path() / ("hpctrain_unmapped_" + std::to_string(::getpid()))).string();
  for (const bool compressed : {true, false}) {
    hpctrain::sys::remove_tree(dir);
    fs::create_directories(dir);
    Manifest m;
    m.name = "unmapped";
    m.num_classes = 3;
    const io::DType dtype = compressed ? io::DType::kUInt8 : io::DType::kUInt16;
    m.fields = {{"input", dtype, {4}}, {"label", io::DType::kInt64, {}}};
    const std::vector<std::uint16_t> wide(40, 7);
    const std::vector<std::uint8_t> narrow(40, 7);
    const std::vector<std::int64_t> y(10, 1);
    ShardingOptions sharding;
    sharding.deflate_level = compressed ? 1 : 0;
    const void* x = compressed ? static_cast<const void*>(narrow.data()) : static_cast<const void*>(wide.data());
    m.splits["train"] = write_split(dir, "train", m.fields, {x, y.data()}, 10, sharding);
    m.save(dir);
    const Split split = Split::load(dir, "train", kFits, ShardAccess::kMap);
    EXPECT_FALSE(split.maps_files());
    EXPECT_NE(split.why_not_mapped().find(dir + "/train-00000.h5: field 'input'"), std::string::npos);
    EXPECT_NE(split.why_not_mapped().find(compressed ? "its chunks are not stored as rows with a checksum alone"
                                                     : "is uint16, widened"),
              std::string::npos)
        << split.why_not_mapped();
    EXPECT_EQ(split.gather({9}).target.item<std::int64_t>(), 1);
  }
  hpctrain::sys::remove_tree(dir);
}

TEST_F(LoaderTest, BatchesFollowTheSamplerAtEveryPrefetchDepthAndThreadCount) {
  for (const auto& [cache, access] : {std::pair{kFits, ShardAccess::kRead}, std::pair{kTooSmall, ShardAccess::kRead},
                                      std::pair{kFits, ShardAccess::kMap}, std::pair{kTooSmall, ShardAccess::kMap}}) {
    const Split split = Split::load(dir_, "train", cache, access);
    SamplerOptions options;
    options.dataset_size = 50;
    options.world_size = 3;
    options.rank = 1;
    options.batch_size = 4;
    options.seed = 9;
    const DistributedSampler sampler(options);
    const auto order = sampler.global_order(1);
    std::vector<std::vector<std::int64_t>> steps;
    for (const SamplerStep& step : sampler.steps(order, 0)) steps.push_back(step.indices);
    // handoff_bytes 0 keeps the depth as given; 1 MiB reads these tiny batches all ahead.
    for (const LoaderOptions loader_options :
         {LoaderOptions{0, 1, 0}, LoaderOptions{1, 1, 0}, LoaderOptions{3, 1, 0}, LoaderOptions{1, 2, 0},
          LoaderOptions{4, 3, 0}, LoaderOptions{5, 1, 0}, LoaderOptions{1, 1}, LoaderOptions{4, 3}}) {
      const std::string where = "depth " + std::to_string(loader_options.depth) + ", threads " +
                                std::to_string(loader_options.threads) + ", handoff bytes " +
                                std::to_string(loader_options.handoff_bytes) + ", cache " + std::to_string(cache) +
                                (split.maps_files() ? ", mapped" : "");
      Loader loader(split, steps, loader_options);
      for (const auto& indices : steps) {
        const Batch batch = loader.next();
        ASSERT_EQ(batch.input.size(0), static_cast<std::int64_t>(indices.size())) << where;
        for (size_t k = 0; k < indices.size(); ++k) {
          ASSERT_EQ(batch.input[static_cast<std::int64_t>(k)][0].item<float>(), static_cast<float>(indices[k]))
              << where;
          ASSERT_EQ(batch.target[static_cast<std::int64_t>(k)].item<std::int64_t>(), indices[k] % 5) << where;
        }
      }
      EXPECT_THROW(loader.next(), Error);  // past the last step
    }
  }
}

TEST_F(LoaderTest, AReadErrorReachesTheTrainingThreadAfterTheGoodBatches) {
  const Split split = Split::load(dir_, "train");
  for (const int threads : {1, 2, 3}) {
    for (const std::int64_t handoff_bytes : {std::int64_t{0}, std::int64_t{1} << 20}) {
      // With 2 and 3 threads, another thread reads the steps after the bad one, and may finish
      // them first: the error must still come exactly at step 2, also when next() waits for
      // several batches at once (depth 4: two).
      Loader loader(split, {{1, 2}, {3}, {99}, {4}, {5}, {6}}, {4, threads, handoff_bytes});
      EXPECT_EQ(loader.next().input.size(0), 2) << threads;
      EXPECT_EQ(loader.next().input.size(0), 1) << threads;
      EXPECT_THROW(loader.next(), DataError) << threads;
    }
  }
}

TEST_F(LoaderTest, StoppingEarlyDoesNotHang) {
  const Split split = Split::load(dir_, "train");
  std::vector<std::vector<std::int64_t>> steps(100, std::vector<std::int64_t>{1, 2, 3});
  for (const int threads : {1, 2}) {
    for (const std::int64_t handoff_bytes : {std::int64_t{0}, std::int64_t{1} << 20}) {
      // handoff_bytes 0: the destructor joins while the threads wait for room (with 1 MiB, these
      // tiny batches are all read ahead).
      Loader loader(split, steps, {4, threads, handoff_bytes});
      loader.next();
    }
  }
}

// Batch k of a synthetic reader: `bytes` of int8 whose first element is k % 128, read after
// a pause now and then, so that readers and the training thread overtake each other.
Batch numbered_batch(std::int64_t k, std::int64_t bytes) {
  if (k % 7 == 3) std::this_thread::sleep_for(std::chrono::microseconds(200));
  Batch batch = batch_of(at::zeros({bytes}, at::kChar), at::full({1}, k, at::kLong));
  batch.input[0] = static_cast<int>(k % 128);
  return batch;
}

// Note [Hand-off]: each side waits for runs of batches. Whatever the depth, thread count, batch
// size and pace, every batch arrives once, in order, and nothing hangs (ctest's timeout).
TEST(LoaderHandOff, BatchesArriveInOrderWhicheverSideWaits) {
  constexpr std::int64_t kSteps = 120;
  std::vector<std::vector<std::int64_t>> steps;
  for (std::int64_t k = 0; k < kSteps; ++k) steps.push_back({k});
  for (const std::int64_t bytes : {std::int64_t{64}, std::int64_t{300} << 10}) {
    for (const LoaderOptions options : {LoaderOptions{1, 1, 0}, LoaderOptions{4, 1, 0}, LoaderOptions{5, 2, 0},
                                        LoaderOptions{8, 3, 0}, LoaderOptions{2, 1}, LoaderOptions{2, 3}}) {
      Loader loader([bytes](const std::vector<std::int64_t>& step) { return numbered_batch(step[0], bytes); },
                    steps, options);
      for (std::int64_t k = 0; k < kSteps; ++k) {
        if (k % 11 == 5) std::this_thread::sleep_for(std::chrono::microseconds(300));
        const Batch batch = loader.next();
        ASSERT_EQ(batch.target.item<std::int64_t>(), k) << bytes << " bytes, depth " << options.depth;
        ASSERT_EQ(batch.input[0].item<int>(), static_cast<int>(k % 128));
      }
    }
  }
}

// Waits up to 20 s for `count` to reach `at_least`.
bool reaches(const std::atomic<int>& count, int at_least) {
  for (int i = 0; i < 2000 && count.load() < at_least; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return count.load() >= at_least;
}

// Batches of 1 KiB: with handoff_bytes 1 MiB, depth 1 is raised to 2 MiB of batches (2048), so
// all 100 steps are read before next() is called; with 0, one is.
TEST(LoaderHandOff, SmallBatchesAreReadFurtherAhead) {
  const std::vector<std::vector<std::int64_t>> steps(100, std::vector<std::int64_t>{0});
  for (const std::int64_t handoff_bytes : {std::int64_t{1} << 20, std::int64_t{0}}) {
    std::atomic<int> reads{0};
    Loader loader(
        [&reads](const std::vector<std::int64_t>&) {
          ++reads;
          return batch_of(at::zeros({1024 - 8}, at::kChar), at::zeros({1}, at::kLong));
        },
        steps, {1, 1, handoff_bytes});
    if (handoff_bytes > 0) {
      EXPECT_TRUE(reaches(reads, 100)) << reads.load();
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      EXPECT_LE(reads.load(), 1);
    }
    for (int k = 0; k < 100; ++k) loader.next();
    EXPECT_EQ(reads.load(), 100);
  }
}

// Note [Hand-off], step by step. Batches of 512 KiB make runs of two (handoff_bytes 1 MiB) and a
// depth of 4; each step's read waits until the test opens its gate.
TEST(LoaderHandOff, EachSideWaitsForARunOfTwo) {
  constexpr std::int64_t kBytes = std::int64_t{512} << 10;
  std::mutex mutex;
  std::condition_variable opened;
  std::int64_t gate = 0;  // steps below it may be read
  std::atomic<int> reads{0};
  const auto open_below = [&](std::int64_t step) {
    {
      const std::lock_guard<std::mutex> lock(mutex);
      gate = step;
    }
    opened.notify_all();
  };
  std::vector<std::vector<std::int64_t>> steps;
  for (std::int64_t k = 0; k < 10; ++k) steps.push_back({k});
  Loader loader(
      [&](const std::vector<std::int64_t>& step) {
        std::unique_lock<std::mutex> lock(mutex);
        opened.wait(lock, [&] { return step[0] < gate; });
        ++reads;
        return batch_of(at::zeros({kBytes - 8}, at::kChar), at::full({1}, step[0], at::kLong));
      },
      steps, {1, 1});
  // next() is called before any batch is ready (one that is ready it takes at once), so it
  // waits; then step 0 alone is no run, and it keeps waiting.
  auto first = std::async(std::launch::async, [&] { return loader.next().target.item<std::int64_t>(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  open_below(1);
  ASSERT_TRUE(reaches(reads, 1));
  EXPECT_EQ(first.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  open_below(10);
  ASSERT_EQ(first.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  EXPECT_EQ(first.get(), 0);
  // One taken: the reader has read steps 0-3 (the room below 0 + depth 4, given with the first
  // batch) and waits: next() gives more only at each second batch taken.
  ASSERT_TRUE(reaches(reads, 4));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(reads.load(), 4);
  EXPECT_EQ(loader.next().target.item<std::int64_t>(), 1);  // two taken: room below 2 + 4
  ASSERT_TRUE(reaches(reads, 6));
  EXPECT_EQ(loader.next().target.item<std::int64_t>(), 2);  // three: no more room yet
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(reads.load(), 6);
  EXPECT_EQ(loader.next().target.item<std::int64_t>(), 3);  // four: room below 8
  ASSERT_TRUE(reaches(reads, 8));
  for (std::int64_t k = 4; k < 10; ++k) EXPECT_EQ(loader.next().target.item<std::int64_t>(), k);
}

TEST_F(LoaderTest, MissingShardAndWrongCountAreDataErrors) {
  fs::rename(dir_ + "/train-00002.h5", dir_ + "/elsewhere.h5");
  try {
    Split::load(dir_, "train");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("train-00002.h5: shard listed in the manifest is missing"),
              std::string::npos) << e.what();
  }
  fs::rename(dir_ + "/elsewhere.h5", dir_ + "/train-00002.h5");
  // Shards hold 12, 13, 12, 13 samples: put a 12-sample shard where 13 are listed.
  fs::copy_file(dir_ + "/train-00000.h5", dir_ + "/train-00001.h5", fs::copy_options::overwrite_existing);
  try {
    Split::load(dir_, "train");
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("but the manifest says"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hpctrain::data
