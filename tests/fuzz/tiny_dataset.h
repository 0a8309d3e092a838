// The small valid dataset the dataset targets put the fuzzed file into: 12 training and 4 test
// samples of 1x4x4 uint8 pixels with int64 labels, one shard per split, as `hpctrain prepare`
// lays them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hpctrain::fuzz {

inline constexpr const char* kTinyTrainShard = "train-00000.h5";
inline constexpr std::int64_t kTinyTrainSamples = 12;
// Per sample: image uint8 [1, 4, 4], label int64 [].
inline const std::vector<std::int64_t> kTinyImageShape{1, 4, 4};

// Writes the dataset (manifest.json and the shards) into `dir`, which is created.
void write_tiny_dataset(const std::string& dir);

// Reads the dataset in `dir` every way the trainer and `hpctrain data inspect --verify` read one:
// the manifest, each split's structure against it, every byte of it, and each split's samples
// through Split, read into memory and from the mapped files. Throws what they throw.
void read_dataset_like_a_run(const std::string& dir);

// Copies `file` of a freshly written dataset to `dir`/`seed` (a target's write_seeds).
void write_tiny_dataset_seed(const std::string& file, const std::string& dir, const std::string& seed);

// A dataset target's whole test: `file` of the dataset (written once per process) replaced by the
// input, then read by read_dataset_like_a_run. An error with exit code 3 is the accepted outcome;
// anything else escapes.
int fuzz_tiny_dataset_file(const std::string& file, const std::uint8_t* data, std::size_t size);

}  // namespace hpctrain::fuzz
