// The dataset directory's table of contents (manifest.json): format version, sample schema, input
// normalization, and for each split its HDF5 files with their sample counts.
// docs/dataset-format.md describes the layout. Depends on core and io (for dtypes).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hpctrain/io/h5_file.h"

namespace hpctrain::data {

inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";

struct FieldSpec {
  std::string name;  // also the HDF5 dataset name inside each shard
  io::DType dtype;
  std::vector<std::int64_t> shape;  // per sample; {} for a scalar
};

struct ShardSpec {
  std::string file;  // relative to the dataset directory
  std::int64_t samples = 0;
};

struct SplitSpec {
  std::vector<ShardSpec> shards;
  std::int64_t samples() const;
};

// How a token stream's text was tokenized: "bytes" (each byte a token; no files) or "gpt2", whose
// files `hpctrain prepare text` copies into <dataset>/tokenizer/ and records with their CRC-32s.
struct TokenizerSpec {
  std::string name = "bytes";
  std::map<std::string, std::string> files;  // file name -> "crc32:1a2b3c4d"
};

struct Manifest {
  int version = kManifestVersion;
  std::string name;
  std::vector<FieldSpec> fields;
  std::int64_t num_classes = 0;
  double input_mean = 0.0;  // inputs are scaled to [0,1], then (x - mean) / std
  double input_std = 1.0;
  std::map<std::string, SplitSpec> splits;
  TokenizerSpec tokenizer;  // a token stream's; absent from the file for bytes

  // Throws DataError naming the dataset and what is wrong or missing.
  static Manifest load(const std::string& dataset_dir);
  void save(const std::string& dataset_dir) const;

  const FieldSpec& field(const std::string& name) const;
  const SplitSpec& split(const std::string& name) const;
};

}  // namespace hpctrain::data
