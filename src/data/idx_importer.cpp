// MNIST-family IDX files (train-images-idx3-ubyte[.gz], ...) to an hpctrain dataset.
#include <zlib.h>

#include <array>
#include <filesystem>

#include "hpctrain/core/error.h"
#include "importer_formats.h"

namespace hpctrain::data {
namespace fs = std::filesystem;
namespace {

struct IdxFamily {
  const char* name;
  double mean;  // of the training images scaled to [0, 1]
  double std;
};

constexpr std::array<IdxFamily, 2> kFamilies{{  // the names import_dataset dispatches here
    {"fashion-mnist", 0.2860, 0.3530},
    {"mnist", 0.1307, 0.3081},
}};

// The file `stem`, gzipped or not, under `dir`.
std::string find_idx(const std::string& dir, const std::string& stem) {
  for (const std::string& candidate : {stem + ".gz", stem}) {
    const fs::path path = fs::path(dir) / candidate;
    if (fs::is_regular_file(path)) return path.string();
  }
  throw DataError("'" + dir + "' has no " + stem + "[.gz] (point --source at the directory "
                  "holding the IDX files)");
}

std::vector<std::uint8_t> read_gz(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");  // reads plain files too
  if (file == nullptr) throw DataError("cannot open " + path);
  std::vector<std::uint8_t> bytes;
  std::array<std::uint8_t, 1 << 16> buffer{};
  int n = 0;
  while ((n = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0) {
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + n);
  }
  const bool failed = n < 0;
  gzclose(file);
  if (failed) throw DataError(path + ": corrupt gzip stream");
  return bytes;
}

std::uint32_t big_endian(const std::vector<std::uint8_t>& bytes, size_t offset) {
  return (std::uint32_t{bytes[offset]} << 24) | (std::uint32_t{bytes[offset + 1]} << 16) |
         (std::uint32_t{bytes[offset + 2]} << 8) | std::uint32_t{bytes[offset + 3]};
}

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// An IDX file of unsigned bytes: magic 0x0000 08 <ndim>, ndim big-endian sizes, then the data.
IdxArray read_idx(const std::string& path, std::uint32_t expected_ndim) {
  std::vector<std::uint8_t> bytes = read_gz(path);
  const size_t header = 4 + 4 * expected_ndim;
  if (bytes.size() < header || big_endian(bytes, 0) != (0x0800u | expected_ndim)) {
    throw DataError(path + ": not an IDX file of uint8 with " + std::to_string(expected_ndim) +
                    " dimensions");
  }
  IdxArray out;
  std::int64_t count = 1;
  for (std::uint32_t d = 0; d < expected_ndim; ++d) {
    out.dims.push_back(big_endian(bytes, 4 + 4 * d));
    count *= out.dims.back();
  }
  if (bytes.size() != header + static_cast<size_t>(count)) {
    throw DataError(path + ": truncated or oversized (expected " + std::to_string(header + count) +
                    " bytes, found " + std::to_string(bytes.size()) + ")");
  }
  out.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return out;
}

// Reads one split's images and labels and writes them as shards; returns the split and the
// per-sample image shape.
SplitSpec import_split(const std::string& source, const std::string& prefix,
                       const std::string& split, const std::string& dir,
                       const ImportOptions& options, std::vector<FieldSpec>& fields) {
  IdxArray images = read_idx(find_idx(source, prefix + "-images-idx3-ubyte"), 3);
  IdxArray labels = read_idx(find_idx(source, prefix + "-labels-idx1-ubyte"), 1);
  if (images.dims[0] != labels.dims[0]) {
    throw DataError(source + ": " + prefix + " has " + std::to_string(images.dims[0]) +
                    " images but " + std::to_string(labels.dims[0]) + " labels");
  }
  std::int64_t n = images.dims[0];
  if (options.limit > 0) n = std::min(n, options.limit);
  const std::vector<std::int64_t> image_shape{1, images.dims[1], images.dims[2]};
  if (!fields.empty() && fields[0].shape != image_shape) {
    throw DataError(source + ": " + prefix + " images are not the size of the other split's");
  }
  fields = {{"image", io::DType::kUInt8, image_shape}, {"label", io::DType::kInt64, {}}};
  std::vector<std::int64_t> label64(labels.data.begin(), labels.data.begin() + n);
  for (const std::int64_t label : label64) {
    if (label > 9) throw DataError(source + ": " + prefix + " has label " + std::to_string(label) + " (> 9)");
  }
  return write_split(dir, split, fields, {images.data.data(), label64.data()}, n, options.sharding);
}

}  // namespace

void import_idx(const std::string& format, const ImportOptions& options, const std::string& temp_dir,
                Manifest& manifest) {
  const IdxFamily* family = nullptr;
  for (const auto& f : kFamilies) {
    if (format == f.name) family = &f;
  }
  HT_CHECK(family != nullptr, "import_idx called for " + format);
  manifest.name = family->name;
  manifest.num_classes = 10;
  manifest.input_mean = family->mean;
  manifest.input_std = family->std;
  manifest.splits["train"] = import_split(options.source, "train", "train", temp_dir, options, manifest.fields);
  manifest.splits["test"] = import_split(options.source, "t10k", "test", temp_dir, options, manifest.fields);
}

}  // namespace hpctrain::data
