// Checks a dataset directory against its manifest: every shard present, every field with the
// manifest's dtype and shape and the shard's sample count; optionally reading every chunk so each
// fletcher32 checksum is verified. The first problem is a DataError naming the shard and field.
// Depends on core, io, data/manifest.
#pragma once

#include <cstdint>
#include <string>

#include "hpctrain/data/manifest.h"

namespace hpctrain::data {

struct CheckReport {
  std::int64_t shards = 0;
  std::int64_t bytes_read = 0;  // 0 unless the data was read
};

// Structure only (cheap: opens every shard and reads its metadata).
CheckReport check_structure(const std::string& dataset_dir, const Manifest& manifest);

// Structure plus every byte of every field, in blocks of about 16 MiB.
CheckReport verify_contents(const std::string& dataset_dir, const Manifest& manifest);

// Checks one field of one open shard against the manifest (used by the readers too).
void check_shard_field(const io::H5File& shard, const ShardSpec& spec, const FieldSpec& field);

}  // namespace hpctrain::data
