// Importers that turn public datasets into hpctrain datasets (manifest + HDF5 shards). Each writes
// into a temporary sibling directory and renames it into place only when complete, so a failed
// import leaves nothing behind. Depends on core, io, data/manifest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/data/shard_writer.h"

namespace hpctrain::data {

struct ImportOptions {
  std::string source;          // where the raw files are
  std::string out;             // dataset directory to create
  bool overwrite = false;      // replace an existing `out`
  std::int64_t limit = 0;      // keep only the first `limit` samples of each split; 0: all
  double test_fraction = 0.1;  // npy without X_test.npy, text: the held-out tail
  ShardingOptions sharding;    // shards per split or shard size, compression
  std::string tokenizer = "bytes";  // text: bytes, gpt2, or a tokenizer.json (or a directory holding one)
  std::string vocab;                // text with gpt2: encoder.json
  std::string merges;               // text with gpt2: vocab.bpe
};

// Names accepted by import_dataset: fashion-mnist, mnist, npy, text.
std::vector<std::string> importer_names();

// Imports `format` from options.source into options.out. Throws DataError (bad or missing source)
// or ConfigError (bad options, existing output without overwrite).
void import_dataset(const std::string& format, const ImportOptions& options);

}  // namespace hpctrain::data
