// MNIST-family IDX files (train-images-idx3-ubyte[.gz], ...) to an hpctrain dataset.
#include <zlib.h>

#include <algorithm>
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

// A file read through zlib (gzipped or not), closed on every path.
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (file_ == nullptr) throw DataError("cannot open " + path);
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  // Up to `size` bytes (fewer only at the end of the data).
  size_t read(std::uint8_t* into, size_t size) {
    size_t done = 0;
    while (done < size) {
      const auto want = static_cast<unsigned>(std::min<size_t>(size - done, 1 << 20));
      const int n = gzread(file_, into + done, want);
      if (n < 0) throw DataError(path_ + ": corrupt gzip stream");
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_;
};

std::uint32_t big_endian(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) | (std::uint32_t{bytes[2]} << 8) |
         std::uint32_t{bytes[3]};
}

struct IdxArray {
  std::vector<std::int64_t> dims;
  std::vector<std::uint8_t> data;
};

// An IDX file of unsigned bytes: magic 0x0000 08 <ndim>, ndim big-endian sizes, then the data.
// The data is read as it comes, into a buffer that doubles up to what the header states, so a
// damaged header or a gzip bomb takes at most about twice the smaller of the two in memory.
IdxArray read_idx(const std::string& path, std::uint32_t expected_ndim) {
  GzReader file(path);
  std::vector<std::uint8_t> header(4 + 4 * size_t{expected_ndim});
  const std::string what = "an IDX file of uint8 with " + std::to_string(expected_ndim) + " dimensions";
  if (file.read(header.data(), header.size()) != header.size() ||
      big_endian(header.data()) != (0x0800u | expected_ndim)) {
    throw DataError(path + ": not " + what);
  }
  IdxArray out;
  std::int64_t count = 1;
  for (std::uint32_t d = 0; d < expected_ndim; ++d) {
    out.dims.push_back(big_endian(header.data() + 4 + 4 * d));
    if (out.dims.back() == 0) throw DataError(path + ": a size of 0 in the header of " + what);
    if (count > kMaxSourceBytes / out.dims.back()) {
      throw DataError(path + ": sizes in the header too large for " + what);
    }
    count *= out.dims.back();
  }
  const auto expected = static_cast<size_t>(count);
  while (out.data.size() < expected) {
    const size_t have = out.data.size();
    out.data.resize(std::min(expected, std::max<size_t>(have * 2, 1 << 20)));
    const size_t n = file.read(out.data.data() + have, out.data.size() - have);
    if (have + n < out.data.size()) {  // the end of the data
      out.data.resize(have + n);
      break;
    }
  }
  size_t found = out.data.size();
  std::array<std::uint8_t, 1 << 16> rest{};
  for (size_t n = 0; (n = file.read(rest.data(), rest.size())) > 0;) found += n;  // bytes after the data
  if (found != expected) {
    throw DataError(path + ": truncated or oversized (expected " + std::to_string(header.size() + expected) +
                    " bytes, found " + std::to_string(header.size() + found) + ")");
  }
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
