#include "hpctrain/ddp/bucket_plan.h"

#include <gtest/gtest.h>

#include <numeric>

namespace hpctrain::ddp {
namespace {

std::vector<std::vector<size_t>> members(const std::vector<Bucket>& plan) {
  std::vector<std::vector<size_t>> out;
  for (const auto& b : plan) out.push_back(b.parameters);
  return out;
}

TEST(BucketPlan, FillsInReverseParameterOrderUpToTheCap) {
  const auto plan = plan_buckets({4, 4, 4, 4, 4}, 8);
  EXPECT_EQ(members(plan), (std::vector<std::vector<size_t>>{{4, 3}, {2, 1}, {0}}));
  EXPECT_EQ(plan[0].numel, 8);
  EXPECT_EQ(plan[2].numel, 4);
}

TEST(BucketPlan, AParameterLargerThanTheCapGetsABucketOfItsOwn) {
  const auto plan = plan_buckets({2, 100, 3, 3}, 10);
  EXPECT_EQ(members(plan), (std::vector<std::vector<size_t>>{{3, 2}, {1}, {0}}));
  EXPECT_EQ(plan[1].numel, 100);
}

TEST(BucketPlan, HugeCapIsOneBucketAndTinyCapOneBucketPerParameter) {
  EXPECT_EQ(members(plan_buckets({5, 6, 7}, 1 << 30)), (std::vector<std::vector<size_t>>{{2, 1, 0}}));
  EXPECT_EQ(members(plan_buckets({5, 6, 7}, 1)), (std::vector<std::vector<size_t>>{{2}, {1}, {0}}));
}

TEST(BucketPlan, EveryParameterIsInExactlyOneBucket) {
  std::vector<std::int64_t> numels;
  for (int i = 0; i < 40; ++i) numels.push_back(1 + (i * 37) % 23);
  for (const std::int64_t cap : {1, 7, 30, 100, 10000}) {
    std::vector<int> seen(numels.size(), 0);
    std::int64_t total = 0;
    for (const auto& b : plan_buckets(numels, cap)) {
      std::int64_t sum = 0;
      for (const size_t i : b.parameters) {
        ++seen[i];
        sum += numels[i];
      }
      EXPECT_EQ(sum, b.numel);
      EXPECT_TRUE(b.numel <= cap || b.parameters.size() == 1) << "cap " << cap;
      total += b.numel;
    }
    for (const int count : seen) EXPECT_EQ(count, 1) << "cap " << cap;
    EXPECT_EQ(total, std::accumulate(numels.begin(), numels.end(), std::int64_t{0})) << "cap " << cap;
  }
}

}  // namespace
}  // namespace hpctrain::ddp
