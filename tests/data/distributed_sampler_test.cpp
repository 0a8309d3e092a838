#include "hpctrain/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::data {
namespace {

SamplerOptions options(std::int64_t n, int world, int rank, std::int64_t batch, bool drop_last = false,
                       std::uint64_t seed = 42) {
  SamplerOptions o;
  o.dataset_size = n;
  o.world_size = world;
  o.rank = rank;
  o.batch_size = batch;
  o.seed = seed;
  o.drop_last = drop_last;
  return o;
}

// How often each dataset index is trained on (weight 1) by all ranks from `cursor` to epoch end,
// checking on the way that every rank runs the same number of equally sized steps.
std::map<std::int64_t, int> coverage(std::int64_t n, int world, std::int64_t batch, bool drop_last,
                                     std::int64_t epoch, std::int64_t cursor) {
  std::map<std::int64_t, int> seen;
  const std::int64_t expected_steps = DistributedSampler(options(n, world, 0, batch, drop_last)).steps_from(cursor);
  for (int rank = 0; rank < world; ++rank) {
    const DistributedSampler sampler(options(n, world, rank, batch, drop_last));
    const auto order = sampler.global_order(epoch);
    std::int64_t c = cursor;
    std::int64_t steps = 0;
    for (; sampler.steps_from(c) > 0; ++steps) {
      const SamplerStep step = sampler.step(order, c);
      const SamplerStep rank0 = DistributedSampler(options(n, world, 0, batch, drop_last)).step(order, c);
      EXPECT_EQ(step.indices.size(), rank0.indices.size()) << "ranks disagree on the batch size";
      EXPECT_EQ(step.global_real, rank0.global_real);
      for (size_t i = 0; i < step.indices.size(); ++i) {
        if (step.weights[i] > 0) ++seen[step.indices[i]];
      }
      c = step.next_cursor;
    }
    EXPECT_EQ(steps, expected_steps) << "rank " << rank << " runs a different number of steps";
  }
  return seen;
}

TEST(DistributedSampler, EverySampleExactlyOncePerEpochForWorldSizes1To5) {
  for (const std::int64_t n : {1, 7, 12, 50, 101}) {
    for (int world = 1; world <= 5; ++world) {
      for (const std::int64_t batch : {1, 3, 8}) {
        const auto seen = coverage(n, world, batch, false, 3, 0);
        ASSERT_EQ(static_cast<std::int64_t>(seen.size()), n) << n << " " << world << " " << batch;
        for (const auto& [index, count] : seen) {
          ASSERT_EQ(count, 1) << "index " << index << " n " << n << " world " << world;
        }
      }
    }
  }
}

TEST(DistributedSampler, DropLastTrainsOnlyFullGlobalBatchesEachSampleAtMostOnce) {
  for (int world = 1; world <= 5; ++world) {
    for (const std::int64_t batch : {1, 3, 4}) {
      const std::int64_t n = 50;
      if (world * batch > n) continue;
      const auto seen = coverage(n, world, batch, true, 0, 0);
      EXPECT_EQ(static_cast<std::int64_t>(seen.size()), (n / (world * batch)) * world * batch);
      for (const auto& [index, count] : seen) EXPECT_EQ(count, 1);
    }
  }
}

TEST(DistributedSampler, PaddingIsMaskedAndCountedOutOfTheGlobalBatch) {
  // 10 samples, 3 ranks, batch 4: one step of 10 real samples, 4 slots per rank, 2 padded.
  int padded = 0;
  for (int rank = 0; rank < 3; ++rank) {
    const DistributedSampler sampler(options(10, 3, rank, 4));
    const SamplerStep step = sampler.step(sampler.global_order(0), 0);
    EXPECT_EQ(step.indices.size(), 4u);
    EXPECT_EQ(step.global_real, 10);
    EXPECT_EQ(step.next_cursor, 10);
    padded += static_cast<int>(std::count(step.weights.begin(), step.weights.end(), 0.0f));
  }
  EXPECT_EQ(padded, 2);
}

TEST(DistributedSampler, ResumingAtACursorWithAnotherWorldSizeCoversTheRestExactlyOnce) {
  const std::int64_t n = 103;
  const std::int64_t batch = 4;
  for (int before = 1; before <= 5; ++before) {
    // Run some steps at `before` ranks, then finish the epoch at every other world size.
    const DistributedSampler first(options(n, before, 0, batch));
    const auto order = first.global_order(2);
    std::int64_t cursor = 0;
    for (int s = 0; s < 3 && first.steps_from(cursor) > 0; ++s) cursor = first.step(order, cursor).next_cursor;
    std::map<std::int64_t, int> done;
    for (std::int64_t p = 0; p < cursor; ++p) ++done[order[static_cast<size_t>(p)]];
    for (int after = 1; after <= 5; ++after) {
      if (after == before) continue;
      std::map<std::int64_t, int> all = done;
      for (const auto& [index, count] : coverage(n, after, batch, false, 2, cursor)) all[index] += count;
      ASSERT_EQ(static_cast<std::int64_t>(all.size()), n) << before << " -> " << after;
      for (const auto& [index, count] : all) ASSERT_EQ(count, 1) << before << " -> " << after;
    }
  }
}

TEST(DistributedSampler, SameSeedSameOrderAndEpochsDiffer) {
  const DistributedSampler a(options(1000, 2, 0, 8));
  const DistributedSampler b(options(1000, 2, 0, 8));
  EXPECT_EQ(a.global_order(3), b.global_order(3));
  EXPECT_NE(a.global_order(0), a.global_order(1));
  EXPECT_NE(a.global_order(0), DistributedSampler(options(1000, 2, 0, 8, false, 43)).global_order(0));
  auto order = a.global_order(5);
  std::sort(order.begin(), order.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(DistributedSampler, KnownOrderIsStableAcrossBuilds) {
  // The order is part of the resume contract: it must not change with the compiler or library.
  EXPECT_EQ(DistributedSampler(options(8, 1, 0, 1)).global_order(0),
            (std::vector<std::int64_t>{4, 2, 1, 5, 0, 6, 3, 7}));
}

// Blocks of `rows` samples that restart at every shard of `shard` samples, as a Split reads them.
std::vector<std::int64_t> block_starts(std::int64_t n, std::int64_t shard, std::int64_t rows) {
  std::vector<std::int64_t> starts;
  for (std::int64_t first = 0; first < n; first += shard) {
    for (std::int64_t b = first; b < std::min(n, first + shard); b += rows) starts.push_back(b);
  }
  return starts;
}

SamplerOptions by_blocks(std::int64_t n, int world, int rank, std::vector<std::int64_t> starts, std::int64_t window) {
  SamplerOptions o = options(n, world, rank, 4);
  o.block_starts = std::move(starts);
  o.window_blocks = window;
  return o;
}

// Walks `order` window by window: each must hold exactly `window` whole blocks (the last fewer).
void expect_whole_blocks_per_window(const std::vector<std::int64_t>& order, const std::vector<std::int64_t>& starts,
                                    std::int64_t window, const std::string& where) {
  const auto n = static_cast<std::int64_t>(order.size());
  const auto block_of = [&](std::int64_t i) {
    return static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), i) - starts.begin() - 1);
  };
  const auto block_size = [&](size_t b) { return (b + 1 < starts.size() ? starts[b + 1] : n) - starts[b]; };
  auto blocks_left = static_cast<std::int64_t>(starts.size());
  for (std::int64_t pos = 0; pos < n;) {
    const std::int64_t want = std::min(window, blocks_left);
    std::map<size_t, int> in_window;
    std::int64_t whole = 0;  // samples of the blocks seen so far
    std::int64_t p = pos;
    while (p < n) {
      const size_t b = block_of(order[static_cast<size_t>(p)]);
      if (in_window[b]++ == 0) whole += block_size(b);
      ++p;
      ASSERT_LE(static_cast<std::int64_t>(in_window.size()), want) << where << ": window at " << pos;
      if (static_cast<std::int64_t>(in_window.size()) == want && p - pos == whole) break;
    }
    ASSERT_EQ(p - pos, whole) << where << ": window at " << pos << " ends inside a block";
    blocks_left -= want;
    pos = p;
  }
  EXPECT_EQ(blocks_left, 0) << where;
}

TEST(DistributedSampler, ShufflingByBlocksIsAPermutationOfWholeBlocksPerWindow) {
  for (const std::int64_t n : {1, 10, 97, 1000}) {
    for (const std::int64_t shard : {n, std::int64_t{13}}) {
      for (const std::int64_t rows : {1, 4, 32}) {
        for (const std::int64_t window : {1, 2, 5}) {
          const std::vector<std::int64_t> starts = block_starts(n, shard, rows);
          const DistributedSampler sampler(by_blocks(n, 1, 0, starts, window));
          for (const std::int64_t epoch : {0, 1}) {
            const std::string where = "n " + std::to_string(n) + " shard " + std::to_string(shard) + " rows " +
                                      std::to_string(rows) + " window " + std::to_string(window) + " epoch " +
                                      std::to_string(epoch);
            auto order = sampler.global_order(epoch);
            expect_whole_blocks_per_window(order, starts, window, where);
            std::sort(order.begin(), order.end());
            for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i) << where;
          }
        }
      }
    }
  }
}

TEST(DistributedSampler, ShufflingByBlocksMixesBlocksAndSamplesDifferentlyEachEpoch) {
  const DistributedSampler sampler(by_blocks(1000, 1, 0, block_starts(1000, 1000, 10), 3));
  const auto first = sampler.global_order(0);
  std::vector<std::int64_t> file_order(1000);
  std::iota(file_order.begin(), file_order.end(), 0);
  EXPECT_NE(first, file_order);
  EXPECT_NE(first, sampler.global_order(1));
  EXPECT_EQ(first, DistributedSampler(by_blocks(1000, 1, 0, block_starts(1000, 1000, 10), 3)).global_order(0));
  // Not just the blocks moved: inside the first window, samples of its blocks alternate.
  std::int64_t block_changes = 0;
  for (size_t i = 1; i < 30; ++i) block_changes += first[i] / 10 != first[i - 1] / 10;
  EXPECT_GT(block_changes, 5);
}

TEST(DistributedSampler, ShufflingByBlocksResumesOnAnotherWorldSizeCoveringTheRestOnce) {
  const std::int64_t n = 103;
  const std::vector<std::int64_t> starts = block_starts(n, 40, 8);
  for (int before = 1; before <= 5; ++before) {
    const DistributedSampler first(by_blocks(n, before, 0, starts, 2));
    const auto order = first.global_order(4);
    std::int64_t cursor = 0;
    for (int s = 0; s < 3; ++s) cursor = first.step(order, cursor).next_cursor;
    for (int after = 1; after <= 5; ++after) {
      std::vector<int> seen(static_cast<size_t>(n), 0);
      for (std::int64_t p = 0; p < cursor; ++p) ++seen[static_cast<size_t>(order[static_cast<size_t>(p)])];
      for (int rank = 0; rank < after; ++rank) {
        const DistributedSampler next(by_blocks(n, after, rank, starts, 2));
        for (const std::int64_t i : next.rank_indices(next.global_order(4), cursor)) ++seen[static_cast<size_t>(i)];
      }
      for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << before << " -> " << after;
    }
  }
}

TEST(DistributedSampler, RankIndicesDoNotDependOnTheBatchSize) {
  SamplerOptions o = options(23, 3, 1, 2);
  o.shuffle = false;
  const std::vector<std::int64_t> expected{1, 4, 7, 10, 13, 16, 19, 22};
  const DistributedSampler small(o);
  EXPECT_EQ(small.rank_indices(small.global_order(0), 0), expected);
  o.batch_size = 5;
  const DistributedSampler large(o);
  EXPECT_EQ(large.rank_indices(large.global_order(0), 0), expected);
  EXPECT_EQ(large.rank_indices(large.global_order(0), 9), (std::vector<std::int64_t>{10, 13, 16, 19, 22}));
}

TEST(DistributedSampler, EmptySplitAndNoStepAreErrors) {
  EXPECT_THROW(DistributedSampler(options(0, 2, 0, 1)), DataError);
  EXPECT_THROW(DistributedSampler(options(10, 2, 0, 8, /*drop_last=*/true)), ConfigError);
  EXPECT_NO_THROW(DistributedSampler(options(10, 2, 0, 8, /*drop_last=*/false)));
}

}  // namespace
}  // namespace hpctrain::data
