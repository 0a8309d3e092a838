// Which positions of an epoch each micro-batch of this rank takes, counted by one global cursor:
// what DistributedSampler (the samples of a split) and TokenWindowSampler (the windows of a token
// stream) have in common, so the training loop plans an epoch without knowing which it reads.
// Pure: ints in, ints out. Depends on std only.
#pragma once

#include <cstdint>
#include <vector>

namespace hpctrain::data {

// This rank's share of one step of the sampler (one micro-batch).
struct SamplerStep {
  std::vector<std::int64_t> indices;  // dataset indices (or window offsets), in batch order
  std::vector<float> weights;         // 1 for a real sample, 0 for padding
  std::int64_t global_real = 0;       // real samples in the whole step, over all ranks
  std::int64_t next_cursor = 0;       // the cursor after this step
};

class Sampler {
 public:
  virtual ~Sampler() = default;
  // Steps left in an epoch when it is at `cursor` (0 at the start of an epoch).
  virtual std::int64_t steps_from(std::int64_t cursor) const = 0;
  // This rank's steps from `cursor` to the end of `epoch`.
  virtual std::vector<SamplerStep> steps(std::int64_t epoch, std::int64_t cursor) const = 0;
};

}  // namespace hpctrain::data
