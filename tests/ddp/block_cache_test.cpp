// The block cache (ddp/block_cache.h) as libtorch's CPU allocator: large tensors come from its
// range and are reused, small ones and raw buffers still work, the profiler's memory hook sees
// them, and a repeated step's memory stays where the first step left it.
#include "hpctrain/ddp/block_cache.h"

#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "hpctrain/core/system.h"

namespace hpctrain::ddp {
namespace {

at::Tensor floats(std::int64_t bytes) { return at::ones({bytes / 4}, at::kFloat); }

// Not installed in AddressSanitizer builds, with HPCTRAIN_BLOCK_CACHE=0 or under `ulimit -v`.
#define NEED_BLOCK_CACHE() \
  if (!install_block_cache()) GTEST_SKIP() << "the block cache is not installed here"

TEST(BlockCache, PlacesLargeTensorsInItsRangeAndReusesThem) {
  NEED_BLOCK_CACHE();
  at::Tensor large = floats(4 << 20);
  const void* address = large.data_ptr();
  EXPECT_TRUE(block_cache_holds(address));
  EXPECT_FALSE(block_cache_holds(floats(16 << 10).data_ptr())) << "below the smallest block";
  EXPECT_FALSE(block_cache_holds(floats(std::int64_t{300} << 20).data_ptr())) << "above the largest block";
  large.reset();
  at::Tensor again = floats(4 << 20);
  EXPECT_EQ(again.data_ptr(), address);
  EXPECT_EQ(again.sum().item<float>(), float{1 << 20});
}

TEST(BlockCache, RawBuffersOfEverySizeGoBackThroughItsDeleter) {
  NEED_BLOCK_CACHE();
  c10::Allocator* allocator = c10::GetCPUAllocator();
  for (const std::size_t bytes : {std::size_t{100}, std::size_t{3} << 20}) {
    void* raw = allocator->raw_allocate(bytes);
    static_cast<char*>(raw)[bytes - 1] = 1;
    EXPECT_EQ(block_cache_holds(raw), bytes >= kBlockCacheMinBytes);
    allocator->raw_deallocate(raw);
    if (bytes >= kBlockCacheMinBytes) {
      void* again = allocator->raw_allocate(bytes);
      EXPECT_EQ(again, raw) << "freed, so placed there again";
      allocator->raw_deallocate(again);
    }
  }
}

TEST(BlockCache, LeavesLargeTensorsToMallocWhileLargeAllocationsAreMapped) {
  NEED_BLOCK_CACHE();
  sys::tune_allocator();
  const sys::LargeAllocationsMapped mapped(true);
  if (!sys::large_allocations_mapped()) GTEST_SKIP() << "GLIBC_TUNABLES is set: malloc is left as it is";
  EXPECT_FALSE(block_cache_holds(floats(4 << 20).data_ptr()));
}

// The profiler's memory hook, as train/memory_probe.cpp listens to it.
class Meter : public c10::MemoryReportingInfoBase {
 public:
  virtual void reportMemoryUsage(void*, std::int64_t bytes, std::int64_t, std::int64_t, c10::Device) {
    now += bytes;
    peak = std::max(peak, now);
  }
  virtual void reportMemoryUsage(void*, std::int64_t bytes, size_t, size_t, c10::Device) {
    now += bytes;
    peak = std::max(peak, now);
  }
  virtual bool memoryProfilingEnabled() const { return true; }
  std::int64_t now = 0;
  std::int64_t peak = 0;
};

TEST(BlockCache, ReportsItsBlocksToTheProfilersMemoryHook) {
  NEED_BLOCK_CACHE();
  const auto meter = std::make_shared<Meter>();
  {
    const c10::DebugInfoGuard metering(c10::DebugInfoKind::PROFILER_STATE, meter);
    at::Tensor large = floats(4 << 20);
    EXPECT_TRUE(block_cache_holds(large.data_ptr()));
  }
  EXPECT_EQ(meter->peak, 4 << 20);
  EXPECT_EQ(meter->now, 0);
}

// What a training step does: the same sizes, allocated and freed in the same order, with small
// tensors kept in between. After the first round the range's resident memory does not grow.
TEST(BlockCache, ARepeatedStepReusesTheMemoryOfTheFirst) {
  NEED_BLOCK_CACHE();
  std::vector<at::Tensor> kept;
  const auto step = [&kept] {
    std::vector<at::Tensor> saved;
    for (int layer = 0; layer < 8; ++layer) {
      saved.push_back(floats((layer % 3 + 1) << 20));
      kept.push_back(floats(4 << 10));
    }
    while (!saved.empty()) {
      at::Tensor gradient = floats(saved.back().nbytes());
      saved.pop_back();
    }
  };
  step();
  const std::size_t after_first = block_cache_resident_bytes();
  EXPECT_GE(after_first, std::size_t{6} << 20);
  for (int round = 0; round < 20; ++round) step();
  EXPECT_EQ(block_cache_resident_bytes(), after_first);
}

// Freed blocks stay resident for reuse until a trim gives their memory back.
TEST(BlockCache, KeepsFreedMemoryUntilTrimmed) {
  NEED_BLOCK_CACHE();
  floats(32 << 20);  // made and freed
  const std::size_t kept = block_cache_resident_bytes();
  const std::int64_t rss = sys::current_rss_bytes();
  EXPECT_GE(kept, std::size_t{32} << 20);
  trim_block_cache();
  EXPECT_LE(block_cache_resident_bytes() + (std::size_t{32} << 20), kept);
  EXPECT_LT(sys::current_rss_bytes(), rss - (std::int64_t{16} << 20));
}

}  // namespace
}  // namespace hpctrain::ddp
