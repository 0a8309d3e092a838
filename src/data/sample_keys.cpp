#include "hpctrain/data/sample_keys.h"

#include <ATen/ATen.h>

#include "hpctrain/core/counter_rng.h"

namespace hpctrain::data {

at::Tensor sample_keys(std::uint64_t seed, std::int64_t epoch, const std::vector<std::int64_t>& indices) {
  at::Tensor keys = at::empty({static_cast<std::int64_t>(indices.size())}, at::kLong);
  auto* out = keys.data_ptr<std::int64_t>();
  // A different stream than augmentation's for the same seed: the constant is arbitrary.
  const std::uint64_t epoch_key = splitmix64(splitmix64(seed ^ 0x5EED0D1FULL) ^ static_cast<std::uint64_t>(epoch));
  for (std::size_t i = 0; i < indices.size(); ++i) {
    out[i] = static_cast<std::int64_t>(splitmix64(epoch_key ^ static_cast<std::uint64_t>(indices[i])));
  }
  return keys;
}

}  // namespace hpctrain::data
