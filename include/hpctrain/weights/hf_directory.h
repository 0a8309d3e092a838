// A Hugging Face model directory's weights: model.safetensors, or model.safetensors.index.json
// with the shards its weight_map names. Every shard is a memory map; the tensors view it, never
// copied. Depends on io and ckpt (NamedTensors).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "hpctrain/ckpt/checkpoint.h"

namespace hpctrain::weights {

// model.safetensors.index.json: which file holds each tensor, and the bytes of them all.
struct HfIndex {
  std::map<std::string, std::string> weight_map;  // tensor name -> shard file name
  std::int64_t total_size = -1;                    // metadata.total_size; -1: not given
};

// Parses the index's text. Throws CheckpointError (exit 4) naming `where` for anything but an
// object with a weight_map of names to plain file names (no directories) and an integer total_size.
HfIndex parse_hf_index(const std::string& text, const std::string& where);

struct HfWeights {
  ckpt::NamedTensors tensors;               // in the shards' order, then each shard's
  std::shared_ptr<const void> keep_alive;  // the mappings they view
};

// Opens the directory's weights. Throws CheckpointError naming the file for a missing or
// truncated shard, a tensor in two shards or not where the index says, a total_size the tensors
// do not add up to, or a dtype other than F32, F16 and BF16.
HfWeights open_hf_weights(const std::string& directory);

}  // namespace hpctrain::weights
