// BlockArena (ddp/block_arena.h) reuses freed ranges before it raises its top, best fit first,
// merges free neighbours, and never places two blocks over one another.
#include "hpctrain/ddp/block_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <vector>

namespace hpctrain::ddp {
namespace {

TEST(BlockArena, AFreedBlockIsReusedBeforeTheTopRises) {
  BlockArena arena(1000);
  const auto a = arena.take(100);
  const auto b = arena.take(200);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(*a, 0u);
  EXPECT_EQ(*b, 100u);
  EXPECT_EQ(arena.give_back(*a), 100u);
  EXPECT_EQ(arena.take(100), a);
  EXPECT_EQ(arena.top(), 300u);
}

TEST(BlockArena, TakesTheSmallestFreeRangeThatFitsAndKeepsItsRestFree) {
  BlockArena arena(10000);
  std::vector<std::size_t> at;
  for (const std::size_t bytes : {300, 10, 100, 10, 200, 10}) at.push_back(*arena.take(bytes));
  arena.give_back(at[0]);  // free: 300 at 0, 100 at 310, 200 at 420
  arena.give_back(at[2]);
  arena.give_back(at[4]);
  EXPECT_EQ(arena.take(150), at[4]) << "200 is the smallest range that fits 150";
  EXPECT_EQ(arena.take(50), at[4] + 150) << "the rest of that range";
  EXPECT_EQ(arena.take(90), at[2]);
  EXPECT_EQ(arena.free_bytes(), 300u + 10u);
  EXPECT_EQ(arena.top(), 630u);
}

TEST(BlockArena, FreeNeighboursMergeInAnyOrder) {
  for (const std::vector<int>& order : {std::vector<int>{0, 1, 2}, {2, 1, 0}, {0, 2, 1}, {1, 0, 2}}) {
    BlockArena arena(10000);
    std::vector<std::size_t> at;
    for (int i = 0; i < 3; ++i) at.push_back(*arena.take(100));
    const std::size_t pinned = *arena.take(10);  // keeps the three below the top
    for (const int i : order) arena.give_back(at[i]);
    EXPECT_EQ(arena.take(300), at[0]) << "order " << order[0] << order[1] << order[2];
    EXPECT_EQ(arena.top(), pinned + 10);
  }
}

TEST(BlockArena, FreeingTheTopBlockLowersTheTopPastTheFreeRangesBelowIt) {
  BlockArena arena(1000);
  const auto a = arena.take(100);
  const auto b = arena.take(100);
  const auto c = arena.take(100);
  arena.give_back(*b);
  arena.give_back(*c);
  EXPECT_EQ(arena.top(), 100u);
  EXPECT_EQ(arena.free_bytes(), 0u);
  arena.give_back(*a);
  EXPECT_EQ(arena.top(), 0u);
}

TEST(BlockArena, RefusesWhatPassesItsCapacityAndOffsetsNotInUse) {
  BlockArena arena(250);
  EXPECT_TRUE(arena.take(200));
  EXPECT_FALSE(arena.take(100));
  EXPECT_TRUE(arena.take(50));
  EXPECT_THROW(arena.give_back(7), std::logic_error);
  EXPECT_THROW(arena.bytes_at(7), std::logic_error);
}

// Random takes and frees: blocks in use never overlap, and the books add up.
TEST(BlockArena, BlocksInUseNeverOverlap) {
  BlockArena arena(std::size_t{1} << 30);
  std::mt19937 random(7);
  std::vector<std::pair<std::size_t, std::size_t>> live;  // offset, bytes
  for (int round = 0; round < 5000; ++round) {
    if (live.empty() || random() % 3 != 0) {
      const std::size_t bytes = 1 + random() % 1000;
      live.emplace_back(*arena.take(bytes), bytes);
    } else {
      const std::size_t i = random() % live.size();
      EXPECT_EQ(arena.give_back(live[i].first), live[i].second);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }
  std::sort(live.begin(), live.end());
  std::size_t used = 0;
  for (std::size_t i = 0; i < live.size(); ++i) {
    used += live[i].second;
    if (i > 0) {
      ASSERT_LE(live[i - 1].first + live[i - 1].second, live[i].first);
    }
  }
  EXPECT_EQ(arena.used_bytes(), used);
  EXPECT_LE(live.back().first + live.back().second, arena.top());
  for (const auto& [offset, bytes] : live) EXPECT_EQ(arena.bytes_at(offset), bytes);
  std::shuffle(live.begin(), live.end(), random);
  for (const auto& block : live) arena.give_back(block.first);
  EXPECT_EQ(arena.top(), 0u) << "every free range merged back into the top";
}

}  // namespace
}  // namespace hpctrain::ddp
