// Writes one split's samples into HDF5 shards: one file per shard, one chunked dataset per field
// (chunks of about 1 MiB, fletcher32, optional deflate), named <split>-<k>.h5 with k from 00000.
// Used by every importer, so all datasets share one layout (docs/dataset-format.md).
// Depends on core, io, data/manifest.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/data/manifest.h"

namespace hpctrain::data {

struct ShardingOptions {
  std::int64_t shards = 0;       // shards per split; 0: decided by shard_bytes (or 1)
  std::int64_t shard_bytes = 0;  // target shard size; used when shards is 0
  int deflate_level = 0;         // 0: no compression
};

// Parses "none", "deflate" (level 4) or "deflate:L" (L in 1..9). Throws ConfigError.
int parse_compression(const std::string& text);

// `columns[i]` holds `samples` rows of `fields[i]`, contiguous, in the field's dtype.
// Returns the split's shard list for the manifest. Throws DataError on write failures.
SplitSpec write_split(const std::string& dir, const std::string& split,
                      const std::vector<FieldSpec>& fields, const std::vector<const void*>& columns,
                      std::int64_t samples, const ShardingOptions& options);

// Bytes of one sample of `field`.
std::int64_t row_bytes(const FieldSpec& field);

// Samples per HDF5 chunk of `field` as write_split lays them out: about 1 MiB, at least one.
std::int64_t chunk_rows(const FieldSpec& field);

}  // namespace hpctrain::data
