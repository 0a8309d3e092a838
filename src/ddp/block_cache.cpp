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
#include <optional>

#include "hpctrain/core/system.h"
#include "hpctrain/ddp/block_arena.h"

namespace hpctrain::ddp {
namespace {

// Memory is made writable (and so charged against the kernel's commit limit) in steps of this.
constexpr std::size_t kCommitStepBytes = std::size_t{64} << 20;

std::size_t round_up(std::size_t bytes, std::size_t unit) { return (bytes + unit - 1) / unit * unit; }

// Note [Block cache]: libtorch's CPU tensors from 64 KiB to 256 MiB (a step's activations, their
// gradients, the optimizer's temporaries) are placed by BlockArena in one range of address space
// reserved at start, instead of in malloc's heap. In the heap, the small long-lived allocations
// made all through a step (autograd's nodes, tensors' headers) land between the large buffers,
// whose freed space then cannot merge: the heap's resident size grew 10-30 MiB past what was in
// use, differently from run to run. Mapping each buffer alone instead (glibc's default
// thresholds) costs a page fault per page on every step (Note [Allocator thresholds]). In the
// range only large blocks meet, freed neighbours merge, and each step reuses the memory of the
// step before: its resident size stays near its peak use, without faults once it is reached.
// Free blocks stay resident for the next step, as in a caching allocator: giving back the free
// top on every step (malloc's M_TRIM_THRESHOLD, at 256 MiB) made a language model's step fault
// in all its activations again, 20 % slower. trim_block_cache() gives free memory back where a
// run knows the set-up is over. The range is reserved inaccessible and made writable as its top
// rises, so that, as with malloc's heap, only what was used counts against a strict overcommit
// limit.
class BlockCache final : public c10::Allocator {
 public:
  BlockCache(c10::Allocator* fallback, char* base, std::size_t capacity, std::size_t page)
      : fallback_(fallback), base_(base), capacity_(capacity), page_(page), arena_(capacity) {}

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

  std::size_t resident_bytes() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return resident_top_;
  }

  // Gives the memory of every free block back to the kernel.
  void trim() const;

  static BlockCache* instance;
  static void release(void* address) { instance->give_back(address); }

 private:
  c10::DataPtr allocate_block(std::size_t bytes) const;
  std::optional<std::size_t> take(std::size_t bytes) const;
  void give_back(void* address) const;
  void report(void* address, std::int64_t bytes) const;

  c10::Allocator* fallback_;
  char* base_;
  std::size_t capacity_;
  std::size_t page_;
  mutable std::mutex mutex_;
  mutable BlockArena arena_;
  mutable std::size_t writable_ = 0;      // the range's first bytes, made writable
  mutable std::size_t resident_top_ = 0;  // the arena's highest top since the last trim
};

BlockCache* BlockCache::instance = nullptr;

c10::DataPtr BlockCache::allocate_block(std::size_t bytes) const {
  if (bytes < kBlockCacheMinBytes || bytes > kBlockCacheMaxBytes || sys::large_allocations_mapped()) {
    return fallback_->allocate(bytes);
  }
  const std::size_t rounded = round_up(bytes, page_);
  const std::optional<std::size_t> offset = take(rounded);
  if (!offset) return fallback_->allocate(bytes);  // its out-of-memory error is libtorch's own
  void* address = base_ + *offset;
  report(address, static_cast<std::int64_t>(rounded));
  return {address, address, &BlockCache::release, c10::Device(c10::DeviceType::CPU)};
}

std::optional<std::size_t> BlockCache::take(std::size_t bytes) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<std::size_t> offset = arena_.take(bytes);
  if (!offset) return std::nullopt;
  if (arena_.top() > writable_) {
    const std::size_t writable = std::min(round_up(arena_.top(), kCommitStepBytes), capacity_);
    if (mprotect(base_ + writable_, writable - writable_, PROT_READ | PROT_WRITE) != 0) {
      arena_.give_back(*offset);
      return std::nullopt;
    }
    writable_ = writable;
  }
  resident_top_ = std::max(resident_top_, arena_.top());
  return offset;
}

void BlockCache::give_back(void* address) const {
  if (!holds(address)) {
    fallback_->raw_deleter()(address);
    return;
  }
  const auto offset = static_cast<std::size_t>(static_cast<char*>(address) - base_);
  std::size_t bytes = 0;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    bytes = arena_.bytes_at(offset);
  }
  report(address, -static_cast<std::int64_t>(bytes));  // before another thread can take it
  const std::lock_guard<std::mutex> lock(mutex_);
  arena_.give_back(offset);
}

void BlockCache::trim() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [offset, bytes] : arena_.free_ranges()) madvise(base_ + offset, bytes, MADV_DONTNEED);
  if (resident_top_ > arena_.top() &&
      madvise(base_ + arena_.top(), resident_top_ - arena_.top(), MADV_DONTNEED) == 0) {
    resident_top_ = arena_.top();
  }
}

// To the profiler's memory hook, as libtorch's own CPU allocator does (train/memory_probe.cpp
// listens there). The totals are the cache's own.
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

// Whether to install: not when asked not to, nor where AddressSanitizer must see every buffer, nor
// under a cap on address space (RLIMIT_AS, set by some schedulers), which the reserved range,
// the size of the machine's memory, would take from the rest of the process.
bool wanted() {
  const char* setting = std::getenv("HPCTRAIN_BLOCK_CACHE");
  if (sanitized() || (setting != nullptr && std::strcmp(setting, "0") == 0)) return false;
  rlimit limit{};
  return getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur == RLIM_INFINITY;
}

}  // namespace

bool install_block_cache() {
  static const bool installed = [] {
    c10::Allocator* fallback = c10::GetCPUAllocator();
    const long page = sysconf(_SC_PAGESIZE);
    const long pages = sysconf(_SC_PHYS_PAGES);
    if (!wanted() || fallback->raw_deleter() == nullptr || page <= 0 || pages <= 0) return false;
    const std::size_t capacity = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
    if (capacity < kBlockCacheMaxBytes) return false;
    void* base = mmap(nullptr, capacity, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return false;
    // Never deleted: tensors may be freed after main returns.
    BlockCache::instance =
        new BlockCache(fallback, static_cast<char*>(base), capacity, static_cast<std::size_t>(page));
    c10::SetCPUAllocator(BlockCache::instance, /*priority=*/1);
    return true;
  }();
  return installed;
}

bool block_cache_holds(const void* address) {
  return BlockCache::instance != nullptr && BlockCache::instance->holds(address);
}

void trim_block_cache() {
  if (BlockCache::instance != nullptr) BlockCache::instance->trim();
}

std::size_t block_cache_resident_bytes() {
  return BlockCache::instance == nullptr ? 0 : BlockCache::instance->resident_bytes();
}

}  // namespace hpctrain::ddp
