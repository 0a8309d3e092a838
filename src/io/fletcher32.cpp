#include "hpctrain/io/fletcher32.h"

#include <cstring>

namespace hpctrain::io {
namespace {

// HDF5 sums big-endian 16-bit words in blocks of 360, folding both sums to 17 bits after each
// block, in uint32 arithmetic that may wrap within a block. It is bit-exact to compute each
// block's two sums by any exact method and fold them the same way: the block's word sum S and
// weighted sum W = sum over its n words w_i (i from 0) of (n - i) * w_i, since
//   sum1' = sum1 + S,   sum2' = sum2 + n * sum1 + W   (all mod 2^32, as HDF5's loop).
constexpr size_t kBlockWords = 360;

// Lanes of 8 words: lane j sums A_j = sum_s v[8s+j] and B_j = sum_s (m - s) v[8s+j] over the m
// steps, from which W = 8 * sum B_j - sum j * A_j. GCC and Clang vector types keep this portable.
using Words = std::uint16_t __attribute__((vector_size(16)));
using Sums = std::uint32_t __attribute__((vector_size(32)));
constexpr size_t kLanes = 8;

inline std::uint32_t big_endian_word(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) << 8 | p[1];
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// AVX2 doubles the rate where the CPU has it; the default clone is SSE2 (x86-64's baseline).
__attribute__((target_clones("avx2", "default")))
#endif
void block_sums(const unsigned char* p, size_t n, std::uint32_t& S, std::uint32_t& W) {
  const size_t steps = n / kLanes;
  Sums a{};
  Sums b{};
  for (size_t s = 0; s < steps; ++s) {
    Words x;
    std::memcpy(&x, p + 2 * kLanes * s, sizeof x);
    x = static_cast<Words>((x << 8) | (x >> 8));
    a += __builtin_convertvector(x, Sums);
    b += a;
  }
  std::uint32_t sum_a = 0;
  std::uint32_t sum_b = 0;
  std::uint32_t weighted_a = 0;
  for (size_t j = 0; j < kLanes; ++j) {
    sum_a += a[j];
    sum_b += b[j];
    weighted_a += static_cast<std::uint32_t>(j) * a[j];
  }
  // Words after the last full step: their weights run r..1, and each earlier word's weight
  // grows by r.
  const auto rest = static_cast<std::uint32_t>(n - steps * kLanes);
  S = sum_a;
  W = static_cast<std::uint32_t>(kLanes) * sum_b - weighted_a + rest * sum_a;
  const unsigned char* tail = p + 2 * kLanes * steps;
  for (std::uint32_t k = 0; k < rest; ++k) {
    const std::uint32_t v = big_endian_word(tail + 2 * k);
    S += v;
    W += (rest - k) * v;
  }
}

inline std::uint32_t fold(std::uint32_t sum) { return (sum & 0xffff) + (sum >> 16); }

}  // namespace

std::uint32_t fletcher32(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t sum1 = 0;
  std::uint32_t sum2 = 0;
  for (size_t words = bytes / 2; words > 0;) {
    const size_t n = words < kBlockWords ? words : kBlockWords;
    std::uint32_t S = 0;
    std::uint32_t W = 0;
    block_sums(p, n, S, W);
    sum2 += static_cast<std::uint32_t>(n) * sum1 + W;
    sum1 += S;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
    p += 2 * n;
    words -= n;
  }
  if (bytes % 2 != 0) {  // a last odd byte counts as the high byte of a word
    sum1 += static_cast<std::uint32_t>(*p) << 8;
    sum2 += sum1;
    sum1 = fold(sum1);
    sum2 = fold(sum2);
  }
  return fold(sum2) << 16 | fold(sum1);
}

bool fletcher32_matches(std::uint32_t stored, std::uint32_t computed) {
  const std::uint32_t swapped = (computed & 0x00ff00ffu) << 8 | (computed >> 8 & 0x00ff00ffu);
  return stored == computed || stored == swapped;
}

}  // namespace hpctrain::io
