// Mapped buffers (ddp/mapped_memory.h) are zero-filled tensors like at::zeros', and their memory
// leaves the process when the last tensor on it goes.
#include "hpctrain/ddp/mapped_memory.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "hpctrain/core/system.h"

namespace hpctrain::ddp {
namespace {

TEST(MappedMemory, GivesZerosThatAreWrittenAndReadLikeAnyTensor) {
  at::Tensor t = mapped_zeros(1000, at::TensorOptions().dtype(at::kFloat));
  EXPECT_EQ(t.numel(), 1000);
  EXPECT_EQ(t.scalar_type(), at::kFloat);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.abs().sum().item<float>(), 0.0f);
  t.narrow(0, 10, 5).fill_(2.0f);
  EXPECT_EQ(t.sum().item<float>(), 10.0f);
  const at::Tensor view = t.narrow(0, 10, 1);
  t.reset();
  EXPECT_EQ(view.item<float>(), 2.0f) << "a view keeps the mapping alive";
  EXPECT_EQ(mapped_zeros(0, at::TensorOptions().dtype(at::kFloat)).numel(), 0);
}

TEST(MappedMemory, IsReturnedToTheKernelWhenFreed) {
  constexpr std::int64_t kBytes = std::int64_t{64} << 20;
  const std::int64_t before = sys::current_rss_bytes();
  {
    at::Tensor t = mapped_zeros(kBytes / 4, at::TensorOptions().dtype(at::kFloat));
    t.fill_(1.0f);  // touched: resident
    EXPECT_GT(sys::current_rss_bytes(), before + kBytes / 2);
  }
  EXPECT_LT(sys::current_rss_bytes(), before + kBytes / 2);
}

}  // namespace
}  // namespace hpctrain::ddp
