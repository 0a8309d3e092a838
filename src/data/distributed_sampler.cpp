#include "hpctrain/data/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  HT_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
           "bad rank/world size");
  HT_CHECK(options.batch_size >= 1, "batch size must be >= 1");
  if (options.dataset_size < 1) throw DataError("the split to sample from is empty");
  if (steps_from(0) == 0) {
    throw ConfigError("train.drop_last: a global batch of " +
                      std::to_string(options.world_size * options.batch_size) + " (" +
                      std::to_string(options.world_size) + " ranks x batch_size " +
                      std::to_string(options.batch_size) + ") is larger than the split's " +
                      std::to_string(options.dataset_size) +
                      " samples, so no step would run; lower train.batch_size or set "
                      "train.drop_last=false");
  }
}

std::vector<std::int64_t> DistributedSampler::global_order(std::int64_t epoch) const {
  std::vector<std::int64_t> order(static_cast<size_t>(options_.dataset_size));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    // Fisher-Yates driven by mt19937_64, whose output the standard fixes, so the order is the same
    // with every compiler and library (std::shuffle's is not). The modulo bias of a 64-bit draw is
    // below 2^-24 for any dataset under 2^40 samples.
    std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch));
    for (size_t i = order.size() - 1; i > 0; --i) {
      const auto j = static_cast<size_t>(rng() % (i + 1));
      std::swap(order[i], order[j]);
    }
  }
  return order;
}

std::int64_t DistributedSampler::steps_from(std::int64_t cursor) const {
  const std::int64_t remaining = std::max<std::int64_t>(0, options_.dataset_size - cursor);
  const std::int64_t global_batch = options_.world_size * options_.batch_size;
  return options_.drop_last ? remaining / global_batch
                            : (remaining + global_batch - 1) / global_batch;
}

SamplerStep DistributedSampler::step(const std::vector<std::int64_t>& order,
                                     std::int64_t cursor) const {
  HT_CHECK(steps_from(cursor) > 0, "no step left in this epoch");
  const std::int64_t n = options_.dataset_size;
  const std::int64_t w = options_.world_size;
  const std::int64_t global_batch = w * options_.batch_size;
  const std::int64_t taken = std::min(global_batch, n - cursor);
  SamplerStep out;
  out.global_real = taken;
  out.next_cursor = cursor + taken;
  const std::int64_t slots = (taken + w - 1) / w;  // = batch_size except in a padded last step
  for (std::int64_t k = 0; k < slots; ++k) {
    const std::int64_t position = cursor + options_.rank + k * w;
    const bool real = position < out.next_cursor;
    out.indices.push_back(order[static_cast<size_t>(position % n)]);
    out.weights.push_back(real ? 1.0f : 0.0f);
  }
  return out;
}

std::vector<SamplerStep> DistributedSampler::steps(const std::vector<std::int64_t>& order,
                                                   std::int64_t cursor) const {
  std::vector<SamplerStep> out;
  for (std::int64_t left = steps_from(cursor); left > 0; --left) {
    out.push_back(step(order, cursor));
    cursor = out.back().next_cursor;
  }
  return out;
}

std::vector<std::int64_t> DistributedSampler::rank_indices(const std::vector<std::int64_t>& order,
                                                           std::int64_t cursor) const {
  std::vector<std::int64_t> out;
  for (const SamplerStep& next : steps(order, cursor)) {
    for (size_t i = 0; i < next.indices.size(); ++i) {
      if (next.weights[i] > 0) out.push_back(next.indices[i]);
    }
  }
  return out;
}

}  // namespace hpctrain::data
