// Writes a Hugging Face model directory's weights as transformers' save_pretrained does: one
// model.safetensors, or shards of at most a given size named model-0000k-of-0000N.safetensors
// with model.safetensors.index.json (weight_map, metadata.total_size). Each tensor is read only
// when its shard is written, so no more than one shard's tensors are ever in memory. Depends on
// io, ckpt (NamedTensors) and ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hpctrain::weights {

// A tensor to write, described before it is read.
struct TensorToWrite {
  std::string name;
  std::vector<std::int64_t> shape;
  std::function<at::Tensor()> read;  // the tensor, of `shape`, in any floating dtype
};

struct HfWeightsWritten {
  std::int64_t files = 0;        // safetensors files
  std::int64_t total_bytes = 0;  // of the tensors, as the index's total_size
};

// Writes `tensors` in `dtype` (float32, bfloat16 or float16) into `directory`, which must exist.
// A tensor larger than `max_shard_bytes` gets a shard of its own. Throws Error(kUsage) naming a
// file that cannot be written.
HfWeightsWritten write_hf_weights(const std::string& directory, const std::vector<TensorToWrite>& tensors,
                                  at::ScalarType dtype, std::int64_t max_shard_bytes);

}  // namespace hpctrain::weights
