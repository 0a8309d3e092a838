#include "hpctrain/data/dataset_check.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "hpctrain/core/error.h"
#include "hpctrain/data/shard_writer.h"

namespace hpctrain::data {
namespace {

io::H5File open_shard(const std::string& dir, const ShardSpec& spec) {
  const std::string path = (std::filesystem::path(dir) / spec.file).string();
  if (!std::filesystem::exists(path)) {
    throw DataError(path + ": shard listed in the manifest is missing");
  }
  return io::H5File::open_read(path, ExitCode::kData);
}

template <typename Visit>
CheckReport for_each_field(const std::string& dir, const Manifest& manifest, Visit visit) {
  CheckReport report;
  for (const auto& [split_name, split] : manifest.splits) {
    if (split.shards.empty() || split.samples() == 0) {
      throw DataError(dir + ": split '" + split_name + "' is empty");
    }
    for (const auto& spec : split.shards) {
      const io::H5File shard = open_shard(dir, spec);
      for (const auto& field : manifest.fields) {
        check_shard_field(shard, spec, field);
        report.bytes_read += visit(shard, spec, field);
      }
      ++report.shards;
    }
  }
  return report;
}

}  // namespace

void check_shard_field(const io::H5File& shard, const ShardSpec& spec, const FieldSpec& field) {
  if (!shard.exists(field.name)) {
    throw DataError(shard.path() + ": field '" + field.name + "' is missing");
  }
  const io::DatasetInfo info = shard.info(field.name);
  std::vector<std::int64_t> expected{spec.samples};
  expected.insert(expected.end(), field.shape.begin(), field.shape.end());
  if (info.dtype != field.dtype || info.shape != expected) {
    throw DataError(shard.path() + ": field '" + field.name + "' is " + io::dtype_name(info.dtype) +
                    io::shape_text(info.shape) + " but the manifest says " + io::dtype_name(field.dtype) +
                    io::shape_text(expected) + " (" + std::to_string(spec.samples) + " samples)");
  }
}

CheckReport check_structure(const std::string& dataset_dir, const Manifest& manifest) {
  return for_each_field(dataset_dir, manifest,
                        [](const io::H5File&, const ShardSpec&, const FieldSpec&) { return 0; });
}

CheckReport verify_contents(const std::string& dataset_dir, const Manifest& manifest) {
  constexpr std::int64_t kBlockBytes = 16 << 20;
  return for_each_field(dataset_dir, manifest, [](const io::H5File& shard, const ShardSpec& spec,
                                                  const FieldSpec& field) -> std::int64_t {
    const std::int64_t bytes = row_bytes(field);
    const std::int64_t rows_per_block = std::max<std::int64_t>(1, kBlockBytes / bytes);
    std::vector<char> buffer(static_cast<size_t>(rows_per_block * bytes));
    for (std::int64_t first = 0; first < spec.samples; first += rows_per_block) {
      const std::int64_t count = std::min(rows_per_block, spec.samples - first);
      try {
        shard.read_rows(field.name, field.dtype, first, count, buffer.data());
      } catch (const Error& e) {
        throw DataError(shard.path() + ": field '" + field.name + "', rows " + std::to_string(first) +
                        "-" + std::to_string(first + count - 1) + ": " + e.what());
      }
    }
    return spec.samples * bytes;
  });
}

}  // namespace hpctrain::data
