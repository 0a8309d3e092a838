#include "hpctrain/data/distributed_sampler.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <random>
#include <string>

#include "hpctrain/core/error.h"

namespace hpctrain::data {

DistributedSampler::DistributedSampler(const SamplerOptions& options) : options_(options) {
  HT_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
           "bad rank/world size");
  HT_CHECK(options.batch_size >= 1, "batch size must be >= 1");
  HT_CHECK(options.window_blocks >= 1, "a shuffle window holds at least one block");
  HT_CHECK(options.block_starts.empty() ||
               (options.block_starts.front() == 0 && options.block_starts.back() < options.dataset_size &&
                std::adjacent_find(options.block_starts.begin(), options.block_starts.end(),
                                   std::greater_equal<>()) == options.block_starts.end()),
           "shuffle blocks must start at 0 and at increasing samples inside the split");
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

namespace {

// Fisher-Yates driven by mt19937_64, whose output the standard fixes, so the order is the same with
// every compiler and library (std::shuffle's is not). The modulo bias of a 64-bit draw is below
// 2^-24 for any range under 2^40 elements.
void shuffle_range(std::int64_t* first, std::int64_t count, std::mt19937_64& rng) {
  for (std::int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(first[i], first[j]);
  }
}

}  // namespace

std::vector<SamplerStep> DistributedSampler::steps(std::int64_t epoch, std::int64_t cursor) const {
  return steps(global_order(epoch), cursor);
}

std::vector<std::int64_t> DistributedSampler::global_order(std::int64_t epoch) const {
  const std::int64_t n = options_.dataset_size;
  std::vector<std::int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (!options_.shuffle) return order;
  std::mt19937_64 rng(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch));
  if (options_.block_starts.empty()) {
    shuffle_range(order.data(), n, rng);
    return order;
  }
  // Blocks in a random order, then the samples of each window of window_blocks blocks shuffled.
  const std::vector<std::int64_t>& starts = options_.block_starts;
  std::vector<size_t> blocks(starts.size());
  std::iota(blocks.begin(), blocks.end(), 0);
  for (size_t i = blocks.size() - 1; i > 0; --i) std::swap(blocks[i], blocks[rng() % (i + 1)]);
  const auto window = static_cast<size_t>(options_.window_blocks);
  std::int64_t position = 0;
  for (size_t w = 0; w < blocks.size(); w += window) {
    const std::int64_t window_start = position;
    for (size_t k = w; k < std::min(blocks.size(), w + window); ++k) {
      const size_t b = blocks[k];
      const std::int64_t end = b + 1 < starts.size() ? starts[b + 1] : n;
      for (std::int64_t i = starts[b]; i < end; ++i) order[static_cast<size_t>(position++)] = i;
    }
    shuffle_range(order.data() + window_start, position - window_start, rng);
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
