// Which samples each rank trains on, step by step. Per epoch one global permutation from (seed,
// epoch), identical on every rank. The position inside the epoch is one global cursor: a step takes
// the next world_size x batch_size positions of the permutation and deals them out, rank r taking
// positions cursor + r, cursor + r + W, ... So the samples left after cursor C are the same set
// whatever the world size, and a run resumed at C with W' ranks covers exactly those, once.
// A split larger than memory shuffles by blocks instead (block_starts, data.shuffle_window_mb):
// the epoch's order visits the split's blocks of consecutive samples (the HDF5 chunks a Split
// reads) in a random order, and shuffles the samples within each window of window_blocks
// consecutive blocks of that order, so a reader holding two windows reads each block once an epoch.
// The last, partial step of an epoch is either dropped (drop_last) or padded: every rank gets
// ceil(remaining / W) slots, the ones past the end carry weight 0 and are masked out of the loss and
// the metrics. Every rank thus runs the same number of steps and issues the same collectives.
// Pure: takes ints, never a Communicator. Depends on std, core and data/sampler.h.
#pragma once

#include <cstdint>
#include <vector>

#include "hpctrain/data/sampler.h"

namespace hpctrain::data {

struct SamplerOptions {
  std::int64_t dataset_size = 0;
  int world_size = 1;
  int rank = 0;
  std::int64_t batch_size = 1;  // per rank
  std::uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  std::vector<std::int64_t> block_starts;  // first sample of each block, from 0; empty: global shuffle
  std::int64_t window_blocks = 1;          // blocks whose samples are shuffled together
};

class DistributedSampler final : public Sampler {
 public:
  // Throws DataError for an empty dataset, ConfigError when an epoch would have no step.
  explicit DistributedSampler(const SamplerOptions& options);

  const SamplerOptions& options() const { return options_; }
  // The epoch's global order, identical on every rank.
  std::vector<std::int64_t> global_order(std::int64_t epoch) const;
  // Steps left in an epoch when it is at `cursor` (0 at the start of an epoch).
  std::int64_t steps_from(std::int64_t cursor) const override;
  // Every step of this rank from `cursor` to the end of `epoch`, in its global_order.
  std::vector<SamplerStep> steps(std::int64_t epoch, std::int64_t cursor) const override;
  // The step that starts at `cursor` of `order` (from global_order). Requires steps_from(cursor) > 0.
  SamplerStep step(const std::vector<std::int64_t>& order, std::int64_t cursor) const;
  // Every step of this rank from `cursor` to the end of the epoch.
  std::vector<SamplerStep> steps(const std::vector<std::int64_t>& order, std::int64_t cursor) const;
  // Every real sample this rank trains on from `cursor` to the end of the epoch, in order.
  std::vector<std::int64_t> rank_indices(const std::vector<std::int64_t>& order,
                                         std::int64_t cursor) const;

 private:
  SamplerOptions options_;
};

}  // namespace hpctrain::data
