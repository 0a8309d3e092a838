#include "hpctrain/data/batch_pool.h"

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "hpctrain/core/error.h"

namespace hpctrain::data {
namespace {

TEST(BatchPool, GivesTensorsOfTheAskedShapeAndTypeOnAlignedWritableMemory) {
  const auto pool = BatchPool::make();
  at::Tensor t = pool->empty({3, 1, 28, 28}, at::kByte);
  EXPECT_EQ(t.sizes(), (std::vector<std::int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(t.scalar_type(), at::kByte);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 64, 0u);
  t.fill_(7);
  EXPECT_EQ(t.sum().item<std::int64_t>(), 7 * 3 * 28 * 28);
  const at::Tensor labels = pool->empty({5}, at::kLong);
  EXPECT_EQ(labels.nbytes(), 40u);
}

TEST(BatchPool, ADroppedTensorsMemoryServesTheNextOfItsSizeMostRecentFirst) {
  const auto pool = BatchPool::make();
  at::Tensor a = pool->empty({64, 784}, at::kByte);
  at::Tensor b = pool->empty({64, 784}, at::kByte);
  const void* a_data = a.data_ptr();
  const void* b_data = b.data_ptr();
  EXPECT_EQ(pool->buffers_allocated(), 2);
  a.reset();
  b.reset();
  EXPECT_EQ(pool->buffers_held(), 2);
  EXPECT_EQ(pool->empty({64, 784}, at::kByte).data_ptr(), b_data);  // the last returned
  const at::Tensor again = pool->empty({784, 64}, at::kByte);        // same bytes, other shape
  EXPECT_EQ(again.data_ptr(), b_data) << "the first is back in the pool once its tensor went";
  const at::Tensor other = pool->empty({64, 784}, at::kByte);
  EXPECT_EQ(other.data_ptr(), a_data);
  EXPECT_EQ(pool->buffers_allocated(), 2);
  const at::Tensor smaller = pool->empty({63, 784}, at::kByte);
  EXPECT_EQ(pool->buffers_allocated(), 3) << "a buffer serves tensors of its own size only";
}

TEST(BatchPool, AViewKeepsTheBufferFromTheNextTensor) {
  const auto pool = BatchPool::make();
  at::Tensor batch = pool->empty({4, 8}, at::kFloat);
  batch.fill_(1.0f);
  const at::Tensor row = batch[2];
  batch.reset();
  EXPECT_EQ(pool->buffers_held(), 0);
  const at::Tensor next = pool->empty({4, 8}, at::kFloat);
  next.fill_(2.0f);
  EXPECT_EQ(row.sum().item<float>(), 8.0f);
}

TEST(BatchPool, HoldsNoMoreOfASizeThanWereInUseAtOnce) {
  const auto pool = BatchPool::make();
  for (int round = 0; round < 5; ++round) {
    std::vector<at::Tensor> in_flight;
    for (int k = 0; k < 3; ++k) in_flight.push_back(pool->empty({100}, at::kByte));
    in_flight.push_back(pool->empty({7}, at::kLong));
  }
  EXPECT_EQ(pool->buffers_allocated(), 4);
  EXPECT_EQ(pool->buffers_held(), 4);
}

TEST(BatchPool, ASizeBeyondMemoryIsADataErrorNotAShortBuffer) {
  const auto pool = BatchPool::make();
  const std::int64_t huge = std::int64_t{1} << 40;
  EXPECT_THROW(pool->empty({huge, huge}, at::kByte), DataError);
  EXPECT_THROW(pool->empty({huge, std::int64_t{1} << 22}, at::kDouble), DataError);
  EXPECT_EQ(pool->buffers_allocated(), 0);
}

// Under ASan this also shows that the buffers of tensors alive after their pool's owner let go
// are freed once, with the pool, when the last goes.
TEST(BatchPool, TensorsOutliveTheirPoolsOwner) {
  auto pool = BatchPool::make();
  at::Tensor kept = pool->empty({16}, at::kInt);
  at::Tensor dropped = pool->empty({16}, at::kInt);
  dropped.reset();
  pool.reset();
  kept.fill_(3);
  EXPECT_EQ(kept.sum().item<std::int64_t>(), 48);
}

TEST(BatchPool, TensorsMadeOnOneThreadAndDroppedOnAnother) {
  const auto pool = BatchPool::make();
  constexpr int kBatches = 2000;
  std::vector<at::Tensor> made(kBatches);
  std::thread maker([&] {
    for (int i = 0; i < kBatches; ++i) {
      made[static_cast<size_t>(i)] = pool->empty({32 + i % 3}, at::kLong);
      made[static_cast<size_t>(i)].fill_(i);
    }
  });
  maker.join();
  std::thread maker_again([&] {
    for (int i = 0; i < kBatches; ++i) pool->empty({32 + i % 3}, at::kLong).fill_(1);
  });
  std::int64_t sum = 0;
  for (int i = 0; i < kBatches; ++i) {
    sum += made[static_cast<size_t>(i)][0].item<std::int64_t>();
    made[static_cast<size_t>(i)].reset();
  }
  maker_again.join();
  EXPECT_EQ(sum, std::int64_t{kBatches} * (kBatches - 1) / 2);
  EXPECT_LE(pool->buffers_allocated(), kBatches + 3);
  EXPECT_EQ(pool->buffers_held(), pool->buffers_allocated()) << "every buffer is back";
}

}  // namespace
}  // namespace hpctrain::data
