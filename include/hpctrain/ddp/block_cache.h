// libtorch's CPU allocator for large tensors: one reserved range of address space, its blocks
// placed by BlockArena and reused step after step (Note [Block cache] in block_cache.cpp).
// Depends on core and c10.
#pragma once

#include <cstddef>

namespace hpctrain::ddp {

// Requests from kBlockCacheMinBytes to kBlockCacheMaxBytes are placed in the range; others, and
// all while a sys::LargeAllocationsMapped is active, go to libtorch's allocator (malloc).
constexpr std::size_t kBlockCacheMinBytes = std::size_t{64} << 10;
constexpr std::size_t kBlockCacheMaxBytes = std::size_t{256} << 20;

// Makes the cache libtorch's CPU allocator for the rest of the process, unless
// HPCTRAIN_BLOCK_CACHE=0 is set, the build has AddressSanitizer (which must see every buffer),
// RLIMIT_AS caps the address space, or the range cannot be reserved. Returns whether it is
// installed. Idempotent.
bool install_block_cache();

// Whether `address` lies in the cache's range (false when it is not installed).
bool block_cache_holds(const void* address);

// Gives the memory of every free block back to the kernel: what a run's set-up used and its
// steps may not. Free blocks otherwise stay resident for reuse. Nothing when not installed.
void trim_block_cache();

// The bytes of the range that may be resident: up to the highest top its blocks reached since
// the last trim (0 when it is not installed).
std::size_t block_cache_resident_bytes();

}  // namespace hpctrain::ddp
