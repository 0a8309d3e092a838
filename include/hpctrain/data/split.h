// One split of a dataset (e.g. "train"), read on demand from its HDF5 shards: a batch of sample
// indices becomes runs of adjacent rows, each read as one hyperslab, and the rows are put back in
// batch order. Only the samples asked for are read, so each rank reads its own part. Each shard's
// datasets stay open with a chunk cache (data.cache_mb per split), so random-order epochs after the
// first are served from memory. Not thread-safe; see io/h5_file.h on HDF5 and threads.
// Depends on core, io, data/manifest and ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/data/manifest.h"

namespace hpctrain::data {

struct Batch {
  at::Tensor input;   // float32 [B, ...sample shape], normalized
  at::Tensor target;  // int64 [B]
};

class Split {
 public:
  // Opens the split's shards and checks them against the manifest (the first field is the input,
  // the field named "label" the target). Throws DataError on anything missing or malformed.
  static Split load(const std::string& dataset_dir, const std::string& split_name,
                    std::int64_t cache_bytes = std::int64_t{256} << 20);

  std::int64_t size() const;
  const Manifest& manifest() const;
  std::vector<std::int64_t> sample_shape() const;

  // The samples at `indices` (each in [0, size())), in that order; repeats are allowed.
  Batch gather(const std::vector<std::int64_t>& indices) const;
  // Samples [first, first + count).
  Batch range(std::int64_t first, std::int64_t count) const;

 private:
  struct State;
  std::shared_ptr<const State> state_;  // shared: a Split is cheap to copy
};

}  // namespace hpctrain::data
