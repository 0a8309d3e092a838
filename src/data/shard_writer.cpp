#include "hpctrain/data/shard_writer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "hpctrain/core/progress.h"

namespace hpctrain::data {
namespace {

constexpr std::int64_t kChunkBytes = 1 << 20;  // reads of about 1 MiB

std::string shard_name(const std::string& split, std::int64_t k) {
  char name[64];
  std::snprintf(name, sizeof(name), "%s-%05lld.h5", split.c_str(), static_cast<long long>(k));
  return name;
}

}  // namespace

std::int64_t row_bytes(const FieldSpec& field) {
  std::int64_t bytes = static_cast<std::int64_t>(io::dtype_size(field.dtype));
  for (const std::int64_t d : field.shape) bytes *= d;
  return bytes;
}

std::int64_t chunk_rows(const FieldSpec& field) {
  return std::max<std::int64_t>(1, kChunkBytes / row_bytes(field));
}

int parse_compression(const std::string& text) {
  if (text == "none") return 0;
  if (text == "deflate") return 4;
  if (text.rfind("deflate:", 0) == 0 && text.size() == 9 && text[8] >= '1' && text[8] <= '9') {
    return text[8] - '0';
  }
  throw ConfigError("--compression: '" + text + "' is not none, deflate or deflate:1..9");
}

SplitSpec write_split(const std::string& dir, const std::string& split,
                      const std::vector<FieldSpec>& fields, const std::vector<const void*>& columns,
                      std::int64_t samples, const ShardingOptions& options) {
  HT_CHECK(fields.size() == columns.size(), "one column per field");
  std::int64_t sample_bytes = 0;
  for (const auto& f : fields) sample_bytes += row_bytes(f);
  std::int64_t shards = options.shards;
  if (shards <= 0) {
    shards = options.shard_bytes > 0
                 ? std::max<std::int64_t>(1, (samples * sample_bytes + options.shard_bytes - 1) / options.shard_bytes)
                 : 1;
  }
  shards = std::max<std::int64_t>(1, std::min(shards, samples));
  SplitSpec spec;
  ProgressBar progress("  " + split + " shards", shards);
  for (std::int64_t k = 0; k < shards; ++k) {
    // Shard k holds rows [samples*k/shards, samples*(k+1)/shards): sizes differ by at most one.
    const std::int64_t first = samples * k / shards;
    const std::int64_t count = samples * (k + 1) / shards - first;
    const std::string name = shard_name(split, k);
    io::H5File file = io::H5File::create((std::filesystem::path(dir) / name).string(), ExitCode::kData);
    for (size_t i = 0; i < fields.size(); ++i) {
      const std::int64_t bytes = row_bytes(fields[i]);
      io::WriteOptions write;
      write.deflate_level = options.deflate_level;
      write.chunk_rows = chunk_rows(fields[i]);
      std::vector<std::int64_t> shape{count};
      shape.insert(shape.end(), fields[i].shape.begin(), fields[i].shape.end());
      file.write(fields[i].name, fields[i].dtype, shape,
                 static_cast<const char*>(columns[i]) + first * bytes, write);
    }
    file.close();
    spec.shards.push_back({name, count});
    progress.update(k + 1);
    log::debug("{} shard {}/{}: {} samples -> {}", split, k + 1, shards, count, name);
  }
  log::info("  {}: {} samples in {} shard(s)", split, samples, shards);
  return spec;
}

}  // namespace hpctrain::data
