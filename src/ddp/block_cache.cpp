#include "hpctrain/ddp/block_cache.h"

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "hpctrain/core/system.h"
#include "hpctrain/ddp/block_arena.h"

namespace hpctrain::ddp {
namespace {

constexpr std::size_t kPageBytes = 4096;

// Note [Block cache]: libtorch's CPU tensors from 64 KiB to 256 MiB (a step's activations, their
// gradients, the optimizer's temporaries) are placed by BlockArena in one range of address space
// reserved at start, instead of in malloc's heap. In the heap, the small long-lived allocations
// made all through a step (autograd's nodes, tensors' headers) land between the large buffers,
// whose freed space then cannot merge: the heap's resident size grew 10-30 MiB past what was in
// use, differently from run to run. Mapping each buffer alone instead (glibc's default
// thresholds) costs a page fault per 4 KiB on every step (Note [Allocator thresholds]). In the
// range only large blocks meet, freed neighbours merge, and each step reuses the memory of the
// step before: its resident size stays near its peak use, with no faults after the first step.
// As malloc does with its heap's top (M_TRIM_THRESHOLD), free memory at the range's top goes
// back to the kernel once it passes 256 MiB; free memory below the top stays resident.
class BlockCache final : public c10::Allocator {
 public:
  BlockCache(c10::Allocator* fallback, char* base, std::size_t capacity)
      : fallback_(fallback), base_(base), capacity_(capacity), arena_(capacity) {}

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  c10::DataPtr allocate(std::size_t bytes) override { return allocate_block(bytes); }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
#else
  c10::DataPtr allocate(std::size_t bytes) const override { return allocate_block(bytes); }
#endif

  // raw_allocate()/raw_deallocate() (oneDNN's buffers) need a deleter that takes any pointer
  // this allocator returned, the fallback's included.
  c10::DeleterFnPtr raw_deleter() const override { return &BlockCache::release; }

  bool holds(const void* address) const {
    const char* at = static_cast<const char*>(address);
    return at >= base_ && at < base_ + capacity_;
  }

  static BlockCache* instance;
  static void release(void* address) { instance->give_back(address); }

 private:
  c10::DataPtr allocate_block(std::size_t bytes) const;
  void give_back(void* address) const;
  void report(void* address, std::int64_t bytes) const;

  c10::Allocator* fallback_;
  char* base_;
  std::size_t capacity_;
  mutable std::mutex mutex_;
  mutable BlockArena arena_;
  mutable std::size_t resident_top_ = 0;  // the arena's highest top since memory above was given back
};

BlockCache* BlockCache::instance = nullptr;

c10::DataPtr BlockCache::allocate_block(std::size_t bytes) const {
  if (bytes < kBlockCacheMinBytes || bytes > kBlockCacheMaxBytes || sys::large_allocations_mapped()) {
    return fallback_->allocate(bytes);
  }
  const std::size_t rounded = (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  std::optional<std::size_t> offset;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    offset = arena_.take(rounded);
    if (offset) resident_top_ = std::max(resident_top_, arena_.top());
  }
  if (!offset) return fallback_->allocate(bytes);  // the range is full; so is memory, most likely
  void* address = base_ + *offset;
  report(address, static_cast<std::int64_t>(rounded));
  return {address, address, &BlockCache::release, c10::Device(c10::DeviceType::CPU)};
}

void BlockCache::give_back(void* address) const {
  if (!holds(address)) {
    fallback_->raw_deleter()(address);
    return;
  }
  std::size_t bytes = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    bytes = arena_.give_back(static_cast<std::size_t>(static_cast<char*>(address) - base_));
    if (resident_top_ - arena_.top() > kBlockCacheTrimBytes) {
      madvise(base_ + arena_.top(), resident_top_ - arena_.top(), MADV_DONTNEED);
      resident_top_ = arena_.top();
    }
  }
  report(address, -static_cast<std::int64_t>(bytes));
}

// To the profiler's memory hook, as libtorch's own CPU allocator does (train/memory_probe.cpp
// listens there).
void BlockCache::report(void* address, std::int64_t bytes) const {
  if (!c10::memoryProfilingEnabled()) return;
  std::int64_t used = 0;
  std::int64_t reserved = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    used = static_cast<std::int64_t>(arena_.used_bytes());
    reserved = static_cast<std::int64_t>(resident_top_);
  }
  c10::reportMemoryUsageToProfiler(address, bytes, used, reserved, c10::Device(c10::DeviceType::CPU));
}

// Address space for the range: the machine's memory, or half of what RLIMIT_AS leaves where it
// is set (schedulers may cap a job's virtual memory). Untouched, it costs nothing.
std::size_t range_capacity() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  std::size_t capacity = pages > 0 ? static_cast<std::size_t>(pages) * kPageBytes : std::size_t{0};
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    capacity = std::min(capacity, static_cast<std::size_t>(limit.rlim_cur) / 2);
  }
  return capacity / kPageBytes * kPageBytes;
}

bool sanitized() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#endif
#endif
  return false;
}

}  // namespace

bool install_block_cache() {
  static const bool installed = [] {
    const char* setting = std::getenv("HPCTRAIN_BLOCK_CACHE");
    if (sanitized() || (setting != nullptr && std::strcmp(setting, "0") == 0)) return false;
    const std::size_t capacity = range_capacity();
    if (capacity < kBlockCacheMaxBytes) return false;
    void* base = mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return false;
    // Never deleted: tensors may be freed after main returns.
    BlockCache::instance = new BlockCache(c10::GetCPUAllocator(), static_cast<char*>(base), capacity);
    c10::SetCPUAllocator(BlockCache::instance, /*priority=*/1);
    return true;
  }();
  return installed;
}

bool block_cache_holds(const void* address) {
  return BlockCache::instance != nullptr && BlockCache::instance->holds(address);
}

}  // namespace hpctrain::ddp
