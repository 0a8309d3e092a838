// Which windows of a token stream each rank trains on, step by step: the language-model
// counterpart of DistributedSampler. An epoch is (tokens - 1) / block_size windows, as many as fit
// the stream end to end, so it reads about every token once. Window p of epoch e starts at a
// random offset drawn from (seed, e, p) alone, so the windows are the same whatever the world
// size. Like DistributedSampler, the position inside an epoch is one global cursor: a step takes
// positions cursor .. cursor + W*B - 1 and rank r takes cursor + r, cursor + r + W, ...; a run
// resumed at cursor C with W' ranks continues with exactly the windows it would have drawn.
// Every step is full (random windows need no padding): the epoch's last step may draw a few
// positions past its count. Pure: ints in, ints out. Depends on std, core and data/distributed_sampler.
#pragma once

#include <cstdint>
#include <vector>

#include "hpctrain/data/distributed_sampler.h"

namespace hpctrain::data {

struct TokenWindowOptions {
  std::int64_t stream_tokens = 0;  // tokens in the split
  std::int64_t block_size = 1;     // tokens a model sees; a window holds block_size + 1
  int world_size = 1;
  int rank = 0;
  std::int64_t batch_size = 1;  // windows per rank and step
  std::uint64_t seed = 0;
};

class TokenWindowSampler final : public Sampler {
 public:
  // Throws DataError when the stream is shorter than one window.
  explicit TokenWindowSampler(const TokenWindowOptions& options);

  const TokenWindowOptions& options() const { return options_; }
  std::int64_t windows_per_epoch() const;
  // Steps left in the epoch at `cursor` (0 at its start).
  std::int64_t steps_from(std::int64_t cursor) const override;
  // The first token of window `position` of `epoch`: in [0, stream_tokens - block_size - 1].
  std::int64_t offset(std::int64_t epoch, std::int64_t position) const;
  // This rank's windows of the step at `cursor` (indices: their offsets; weights: all 1).
  SamplerStep step(std::int64_t epoch, std::int64_t cursor) const;
  std::vector<SamplerStep> steps(std::int64_t epoch, std::int64_t cursor) const override;
  // Every window offset this rank trains on from `cursor` to the end of the epoch, in order.
  std::vector<std::int64_t> rank_offsets(std::int64_t epoch, std::int64_t cursor) const;

 private:
  TokenWindowOptions options_;
};

}  // namespace hpctrain::data
