// One split of a dataset (e.g. "train") held in host memory: the "image"-style input field and the
// integer "label" field of every shard, read once. Batches are gathered from it by index and
// normalized as the manifest says. (The foundation reads the whole split on every rank; reading only
// this rank's part is the sharded loader's job.) Depends on core, io, data/manifest and ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
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
  // Reads the split's "input" and "label" fields (names from the manifest: the first field is the
  // input, the field named "label" the target). Throws DataError on anything malformed.
  static Split load(const std::string& dataset_dir, const std::string& split_name);

  std::int64_t size() const { return inputs_.size(0); }
  const Manifest& manifest() const { return manifest_; }
  std::vector<std::int64_t> sample_shape() const;

  // The samples at `indices`, in that order.
  Batch gather(const std::vector<std::int64_t>& indices) const;
  // Samples [first, first + count).
  Batch range(std::int64_t first, std::int64_t count) const;

 private:
  Batch to_batch(const at::Tensor& raw_inputs, const at::Tensor& targets) const;

  Manifest manifest_;
  at::Tensor inputs_;   // raw dtype as stored
  at::Tensor targets_;  // int64
};

}  // namespace hpctrain::data
