#include "hpctrain/data/distributed_sampler.h"

#include <numeric>
#include <random>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

DistributedSampler::DistributedSampler(std::int64_t dataset_size, int world_size, int rank,
                                       std::uint64_t seed, bool shuffle)
    : dataset_size_(dataset_size), world_size_(world_size), rank_(rank), seed_(seed),
      shuffle_(shuffle) {
  HT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "bad rank/world size");
  if (dataset_size < 1) throw DataError("the split to sample from is empty");
}

std::int64_t DistributedSampler::samples_per_rank() const {
  return (dataset_size_ + world_size_ - 1) / world_size_;
}

std::vector<std::int64_t> DistributedSampler::global_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order(static_cast<size_t>(dataset_size_));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle_) {
    // Fisher-Yates driven by mt19937_64, whose output the standard fixes, so the order is the same
    // with every compiler and library (std::shuffle's is not). The modulo bias of a 64-bit draw is
    // below 2^-24 for any dataset under 2^40 samples.
    std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch));
    for (size_t i = order.size() - 1; i > 0; --i) {
      const auto j = static_cast<size_t>(rng() % (i + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

std::vector<std::int64_t> DistributedSampler::indices(std::int64_t epoch) const {
  const std::vector<std::int64_t> order = global_order(epoch);
  const std::int64_t total = samples_per_rank() * world_size_;
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<size_t>(samples_per_rank()));
  for (std::int64_t i = rank_; i < total; i += world_size_) {
    mine.push_back(order[static_cast<size_t>(i % dataset_size_)]);  // wrap-around padding
  }
  return mine;
}

}  // namespace hpctrain::data
