// A BufferPool (ddp/buffer_pool.h) lends mapped blocks and takes them back when the last tensor
// on one goes: the next request that fits gets the same memory, and the pool never holds more
// blocks than were lent at once.
#include "hpctrain/ddp/buffer_pool.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

namespace hpctrain::ddp {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;
const at::TensorOptions kFloats = at::TensorOptions().dtype(at::kFloat);

TEST(BufferPool, AFreedBlockServesTheNextRequestThatFits) {
  BufferPool pool;
  at::Tensor first = pool.empty(4 * kMiB / 4, kFloats);
  EXPECT_EQ(first.numel(), kMiB);
  EXPECT_EQ(first.scalar_type(), at::kFloat);
  first.fill_(3.0f);
  EXPECT_EQ(first.sum().item<float>(), 3.0f * static_cast<float>(kMiB));
  const void* memory = first.data_ptr();
  first.reset();
  at::Tensor smaller = pool.empty(3 * kMiB / 4, kFloats);
  EXPECT_EQ(smaller.data_ptr(), memory) << "the free block is lent again";
  EXPECT_EQ(pool.mapped_bytes(), static_cast<std::size_t>(4 * kMiB));
  at::Tensor second = pool.empty(2 * kMiB / 4, kFloats);
  EXPECT_NE(second.data_ptr(), smaller.data_ptr()) << "a block in use is not lent twice";
  EXPECT_EQ(pool.mapped_bytes(), static_cast<std::size_t>(8 * kMiB)) << "mapped as large as the largest request";
}

TEST(BufferPool, TheSmallestFreeBlockThatFitsIsTakenAndOneTooSmallMakesRoomForANewOne) {
  BufferPool pool;
  at::Tensor small = pool.empty(2 * kMiB / 4, kFloats);
  at::Tensor large = pool.empty(8 * kMiB / 4, kFloats);
  const void* small_memory = small.data_ptr();
  large.reset();
  small.reset();
  EXPECT_EQ(pool.empty(2 * kMiB / 4, kFloats).data_ptr(), small_memory) << "best fit";
  // Two free blocks, 2 and 8 MiB, too small for 16: the larger is unmapped.
  at::Tensor huge = pool.empty(16 * kMiB / 4, kFloats);
  EXPECT_EQ(pool.mapped_bytes(), static_cast<std::size_t>(18 * kMiB));
  EXPECT_EQ(pool.empty(2 * kMiB / 4, kFloats).data_ptr(), small_memory) << "still there";
  at::Tensor kept_small = pool.empty(2 * kMiB / 4, kFloats);
  at::Tensor another = pool.empty(3 * kMiB / 4, kFloats);
  EXPECT_EQ(pool.mapped_bytes(), static_cast<std::size_t>(34 * kMiB)) << "a new block is as large as any request yet";
}

TEST(BufferPool, SmallRequestsAreNotPooledAndMemoryMayOutliveThePool) {
  at::Tensor kept;
  {
    BufferPool pool;
    const at::Tensor small = pool.empty(1000, kFloats);
    EXPECT_EQ(pool.mapped_bytes(), 0u);
    kept = pool.empty(2 * kMiB / 4, kFloats);
    kept.fill_(1.0f);
  }
  EXPECT_EQ(kept.sum().item<float>(), static_cast<float>(2 * kMiB / 4));
  kept.reset();  // given back to a shelf only the lease still holds
}

}  // namespace
}  // namespace hpctrain::ddp
