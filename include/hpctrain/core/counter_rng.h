// SplitMix64's finalizer as a counter-based generator: the draw for counter n is mix(n), so any
// rank can compute any draw directly (window p of an epoch, sample i's augmentation) without the
// draws before it. Depends on std only.
#pragma once

#include <cstdint>

namespace hpctrain {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace hpctrain
