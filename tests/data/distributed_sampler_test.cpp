#include "hpctrain/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "hpctrain/core/error.h"

namespace hpctrain::data {
namespace {

TEST(DistributedSampler, RanksAreDisjointAndCoverTheDataset) {
  for (const int world : {1, 2, 3, 4}) {
    std::multiset<std::int64_t> seen;
    for (int rank = 0; rank < world; ++rank) {
      const DistributedSampler sampler(12, world, rank, 7, true);
      const auto mine = sampler.indices(0);
      EXPECT_EQ(static_cast<std::int64_t>(mine.size()), sampler.samples_per_rank());
      seen.insert(mine.begin(), mine.end());
    }
    for (std::int64_t i = 0; i < 12; ++i) EXPECT_EQ(seen.count(i), 1u) << "world " << world;
  }
}

TEST(DistributedSampler, PadsByWrappingSoEveryRankHasTheSameCount) {
  // 10 samples over 3 ranks: 4 each, the first two of the global order used twice.
  std::multiset<std::int64_t> seen;
  for (int rank = 0; rank < 3; ++rank) {
    const auto mine = DistributedSampler(10, 3, rank, 1, true).indices(2);
    EXPECT_EQ(mine.size(), 4u);
    seen.insert(mine.begin(), mine.end());
  }
  const auto order = DistributedSampler(10, 3, 0, 1, true).global_order(2);
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(seen.count(order[0]), 2u);
  EXPECT_EQ(seen.count(order[1]), 2u);
}

TEST(DistributedSampler, EpochsShuffleDifferentlyAndReproducibly) {
  const DistributedSampler a(1000, 2, 0, 42, true);
  const DistributedSampler b(1000, 2, 0, 42, true);
  EXPECT_EQ(a.indices(3), b.indices(3));
  EXPECT_NE(a.indices(0), a.indices(1));
  EXPECT_NE(a.indices(0), DistributedSampler(1000, 2, 0, 43, true).indices(0));
  auto order = a.global_order(5);
  std::sort(order.begin(), order.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(order[static_cast<size_t>(i)], i);
}

TEST(DistributedSampler, KnownOrderIsStableAcrossBuilds) {
  // The order is part of the resume contract: it must not change with the compiler or library.
  const auto order = DistributedSampler(8, 1, 0, 42, true).global_order(0);
  EXPECT_EQ(order, (std::vector<std::int64_t>{4, 2, 1, 5, 0, 6, 3, 7}));
}

TEST(DistributedSampler, NoShuffleKeepsDatasetOrder) {
  EXPECT_EQ(DistributedSampler(6, 2, 1, 42, false).indices(9), (std::vector<std::int64_t>{1, 3, 5}));
}

TEST(DistributedSampler, EmptyDatasetIsAnError) {
  EXPECT_THROW(DistributedSampler(0, 2, 0, 1, true), DataError);
}

}  // namespace
}  // namespace hpctrain::data
