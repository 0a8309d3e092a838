#include "hpctrain/ddp/shard_plan.h"

#include <gtest/gtest.h>

#include <vector>

namespace hpctrain::ddp {
namespace {

TEST(ShardPlan, PadsABucketToAMultipleOfTheWorld) {
  EXPECT_EQ(padded_numel(10, 4), 12);
  EXPECT_EQ(padded_numel(12, 4), 12);
  EXPECT_EQ(padded_numel(1, 3), 3);
  EXPECT_EQ(padded_numel(7, 1), 7);
}

// Over all ranks, every element of every parameter is owned exactly once, at the place in the
// rank's chunk that matches its place in the bucket; a parameter smaller than the world size and
// world sizes that divide nothing included.
TEST(ShardPlan, EveryElementHasExactlyOneOwner) {
  const std::vector<std::int64_t> numels{2, 30, 1, 7, 64, 3};
  for (const std::int64_t cap : {std::int64_t{1}, std::int64_t{16}, std::int64_t{40}, std::int64_t{1000}}) {
    const std::vector<Bucket> buckets = plan_buckets(numels, cap);
    for (const int world : {1, 2, 3, 4, 5, 8}) {
      std::vector<std::vector<int>> owners;
      for (const std::int64_t n : numels) owners.emplace_back(static_cast<size_t>(n), 0);
      for (int rank = 0; rank < world; ++rank) {
        for (const ShardPiece& piece : plan_shard(buckets, numels, world, rank)) {
          const Bucket& bucket = buckets[piece.bucket];
          const std::int64_t chunk = padded_numel(bucket.numel, world) / world;
          std::int64_t offset = 0;  // of the parameter in its bucket
          for (const size_t p : bucket.parameters) {
            if (p == piece.parameter) break;
            offset += numels[p];
          }
          EXPECT_EQ(offset + piece.parameter_offset, chunk * rank + piece.shard_offset);
          EXPECT_LE(piece.shard_offset + piece.numel, chunk);
          for (std::int64_t e = 0; e < piece.numel; ++e) ++owners[piece.parameter][piece.parameter_offset + e];
        }
      }
      for (size_t p = 0; p < owners.size(); ++p) {
        for (const int count : owners[p]) ASSERT_EQ(count, 1) << "cap " << cap << ", world " << world << ", parameter " << p;
      }
    }
  }
}

}  // namespace
}  // namespace hpctrain::ddp
