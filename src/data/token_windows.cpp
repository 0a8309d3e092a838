#include "hpctrain/data/token_windows.h"

#include <string>

#include "hpctrain/core/counter_rng.h"
#include "hpctrain/core/error.h"

namespace hpctrain::data {

TokenWindowSampler::TokenWindowSampler(const TokenWindowOptions& options) : options_(options) {
  HT_CHECK(options.world_size >= 1 && options.rank >= 0 && options.rank < options.world_size,
           "bad rank/world size");
  HT_CHECK(options.batch_size >= 1 && options.block_size >= 1, "batch and block size must be >= 1");
  if (options.stream_tokens < options.block_size + 1) {
    throw DataError("the token stream has " + std::to_string(options.stream_tokens) +
                    " tokens, fewer than one window of block_size + 1 = " +
                    std::to_string(options.block_size + 1) + "; lower the block size");
  }
}

std::int64_t TokenWindowSampler::windows_per_epoch() const {
  return (options_.stream_tokens - 1) / options_.block_size;
}

std::int64_t TokenWindowSampler::steps_from(std::int64_t cursor) const {
  const std::int64_t remaining = windows_per_epoch() - cursor;
  const std::int64_t global_batch = options_.world_size * options_.batch_size;
  return remaining <= 0 ? 0 : (remaining + global_batch - 1) / global_batch;
}

std::int64_t TokenWindowSampler::offset(std::int64_t epoch, std::int64_t position) const {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(options_.seed) ^ static_cast<std::uint64_t>(epoch)) ^
                              static_cast<std::uint64_t>(position));
  // The modulo bias of a 64-bit draw is below 2^-24 for any stream under 2^40 tokens.
  const auto starts = static_cast<std::uint64_t>(options_.stream_tokens - options_.block_size);
  return static_cast<std::int64_t>(h % starts);
}

SamplerStep TokenWindowSampler::step(std::int64_t epoch, std::int64_t cursor) const {
  HT_CHECK(steps_from(cursor) > 0, "no step left in this epoch");
  const std::int64_t w = options_.world_size;
  SamplerStep out;
  out.global_real = w * options_.batch_size;
  out.next_cursor = cursor + out.global_real;
  for (std::int64_t k = 0; k < options_.batch_size; ++k) {
    out.indices.push_back(offset(epoch, cursor + options_.rank + k * w));
    out.weights.push_back(1.0f);
  }
  return out;
}

std::vector<SamplerStep> TokenWindowSampler::steps(std::int64_t epoch, std::int64_t cursor) const {
  std::vector<SamplerStep> out;
  for (std::int64_t left = steps_from(cursor); left > 0; --left) {
    out.push_back(step(epoch, cursor));
    cursor = out.back().next_cursor;
  }
  return out;
}

std::vector<std::int64_t> TokenWindowSampler::rank_offsets(std::int64_t epoch, std::int64_t cursor) const {
  std::vector<std::int64_t> out;
  for (const SamplerStep& next : steps(epoch, cursor)) {
    out.insert(out.end(), next.indices.begin(), next.indices.end());
  }
  return out;
}

}  // namespace hpctrain::data
