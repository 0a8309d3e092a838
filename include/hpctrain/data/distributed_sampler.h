// Which samples each rank sees in an epoch: one global permutation (seeded by seed and epoch, the
// same on every rank), padded by wrapping around to a multiple of the world size, then dealt out
// rank, rank + W, rank + 2W, ... as PyTorch's DistributedSampler does. Every rank gets the same
// count, so all ranks run the same number of steps. Pure: takes ints, never a Communicator.
// Depends on std only.
#pragma once

#include <cstdint>
#include <vector>

namespace hpctrain::data {

class DistributedSampler {
 public:
  DistributedSampler(std::int64_t dataset_size, int world_size, int rank, std::uint64_t seed,
                     bool shuffle);

  // Samples per rank per epoch: ceil(dataset_size / world_size).
  std::int64_t samples_per_rank() const;
  // This rank's sample indices for `epoch`, in the order they are trained on.
  std::vector<std::int64_t> indices(std::int64_t epoch) const;
  // The epoch's global order (before dealing out), identical on every rank.
  std::vector<std::int64_t> global_order(std::int64_t epoch) const;

 private:
  std::int64_t dataset_size_;
  int world_size_;
  int rank_;
  std::uint64_t seed_;
  bool shuffle_;
};

}  // namespace hpctrain::data
