// The small valid dataset the dataset targets read around the fuzzed file: 12 training and 4 test
// samples of 1x4x4 uint8 pixels with int64 labels, one shard per split, as `hpctrain prepare`
// lays them out.
#pragma once

#include <string>

namespace hpctrain::fuzz {

inline constexpr const char* kTinyTrainShard = "train-00000.h5";

// Writes the dataset (manifest.json and the shards) into `dir`, which is created.
void write_tiny_dataset(const std::string& dir);

// Every way the trainer and `hpctrain data inspect` read a dataset directory: the manifest, each
// split's structure against it, every byte of it, and each split's samples through Split.
// Throws DataError as they do.
void read_dataset_like_a_run(const std::string& dir);

}  // namespace hpctrain::fuzz
