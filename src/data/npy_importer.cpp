// NumPy .npy arrays to an hpctrain dataset: X.npy (samples x ...) and y.npy (integer class labels),
// optionally X_test.npy + y_test.npy; without them the last --test-fraction of X/y becomes "test".
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

#include "hpctrain/core/error.h"
#include "hpctrain/core/log.h"
#include "importer_formats.h"

namespace hpctrain::data {
namespace fs = std::filesystem;
namespace {

struct NpyArray {
  io::DType dtype = io::DType::kUInt8;
  std::vector<std::int64_t> shape;
  std::vector<char> data;  // row-major, native little-endian

  std::int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  std::int64_t row_bytes() const {
    std::int64_t bytes = static_cast<std::int64_t>(io::dtype_size(dtype));
    for (size_t i = 1; i < shape.size(); ++i) bytes *= shape[i];
    return bytes;
  }
};

// Header text quoted in an error: one line, and short, whatever the header holds.
std::string quoted(const std::string& text) {
  constexpr size_t kMax = 60;
  std::string out = text.substr(0, kMax);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  return text.size() > kMax ? out + "..." : out;
}

io::DType npy_dtype(const std::string& descr, const std::string& path) {
  if (descr == "|u1" || descr == "<u1") return io::DType::kUInt8;
  if (descr == "<u2") return io::DType::kUInt16;
  if (descr == "<i4") return io::DType::kInt32;
  if (descr == "<i8") return io::DType::kInt64;
  if (descr == "<f4") return io::DType::kFloat32;
  if (descr == "<f8") return io::DType::kFloat64;
  throw DataError(path + ": dtype '" + quoted(descr) + "' is not supported (uint8, uint16, int32, int64, "
                  "float32, float64, little-endian)");
}

// The text after `'key':` in a .npy header (a Python dict literal), up to the end of the value: a
// quoted string without its quotes, a tuple without its parentheses, or anything else up to the
// next comma or brace. Parsed by hand: std::regex recurses once per character matched, and a
// header may be 4 GiB long.
std::optional<std::string> header_value(const std::string& header, const std::string& key) {
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return std::nullopt;
  size_t i = header.find_first_not_of(kSpace, at + key.size() + 2);
  if (i == std::string::npos || header[i] != ':') return std::nullopt;
  i = header.find_first_not_of(kSpace, i + 1);
  if (i == std::string::npos) return std::nullopt;
  const char open = header[i];
  const std::string close = open == '\'' || open == '"' ? std::string(1, open) : open == '(' ? ")" : ",}";
  const size_t first = open == '\'' || open == '"' || open == '(' ? i + 1 : i;
  const size_t end = header.find_first_of(close, first);
  if (end == std::string::npos) return std::nullopt;
  const size_t last = close.size() == 1 ? end : header.find_last_not_of(kSpace, end - 1) + 1;
  return header.substr(first, std::max(last, first) - first);
}

// The dimensions of a shape tuple's text ("10, 28, 28", "10," or Python 2's "10L, 784L"): whole
// numbers below 2^63.
std::vector<std::int64_t> parse_shape(const std::string& dims, const std::string& path) {
  const auto malformed = [&] {
    return DataError(path + ": shape (" + quoted(dims) + ") is not a tuple of whole numbers below 2^63");
  };
  std::vector<std::int64_t> shape;
  std::stringstream items(dims);
  bool ended = false;  // by the empty item after a trailing comma
  for (std::string item; std::getline(items, item, ',');) {
    const size_t first = item.find_first_not_of(" \t\n");
    if (first == std::string::npos) {
      if (ended || shape.empty()) throw malformed();
      ended = true;
      continue;
    }
    if (ended) throw malformed();
    std::string digits = item.substr(first, item.find_last_not_of(" \t\n") + 1 - first);
    if (!digits.empty() && digits.back() == 'L') digits.pop_back();
    std::int64_t value = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (digits.empty() || digits[0] == '-' || error != std::errc() || end != digits.data() + digits.size()) {
      throw malformed();
    }
    shape.push_back(value);
  }
  return shape;
}

// The .npy format: magic "\x93NUMPY", version, header length, a Python dict literal, the data.
// Every size the header states is checked against the file's before memory is taken for it.
NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open");
  std::error_code error;
  const auto file_bytes = static_cast<std::int64_t>(fs::file_size(path, error));
  if (error) throw DataError(path + ": cannot read its size: " + error.message());
  char magic[8] = {};
  in.read(magic, 8);
  if (!in || std::memcmp(magic, "\x93NUMPY", 6) != 0) throw DataError(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  if (major < 1 || major > 3) {
    throw DataError(path + ": .npy format version " + std::to_string(major) + " is not one of 1, 2, 3");
  }
  const int length_size = major == 1 ? 2 : 4;
  std::int64_t header_length = 0;
  unsigned char length_bytes[4] = {};
  in.read(reinterpret_cast<char*>(length_bytes), length_size);
  for (int i = length_size - 1; i >= 0; --i) header_length = header_length * 256 + length_bytes[i];
  const std::int64_t data_offset = 8 + length_size + header_length;
  if (!in || data_offset > file_bytes) throw DataError(path + ": truncated header");
  std::string header(static_cast<size_t>(header_length), '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_length));
  if (!in) throw DataError(path + ": truncated header");

  const std::optional<std::string> descr = header_value(header, "descr");
  if (!descr) throw DataError(path + ": header has no descr");
  NpyArray out;
  out.dtype = npy_dtype(*descr, path);
  // NumPy always writes the key, as False or True: anything else could be column order too.
  const std::optional<std::string> fortran_order = header_value(header, "fortran_order");
  if (fortran_order != std::optional<std::string>("False")) {
    throw DataError(path + ": Fortran-ordered arrays are not supported (save np.ascontiguousarray(a)); "
                    "fortran_order is " + (fortran_order ? quoted(*fortran_order) : std::string("missing")));
  }
  const std::optional<std::string> dims = header_value(header, "shape");
  if (!dims) throw DataError(path + ": header has no shape");
  out.shape = parse_shape(*dims, path);
  if (out.shape.empty()) throw DataError(path + ": a scalar is not a dataset");
  std::int64_t bytes = static_cast<std::int64_t>(io::dtype_size(out.dtype));
  for (const std::int64_t d : out.shape) {
    if (d != 0 && bytes > kMaxSourceBytes / d) throw DataError(path + ": shape (" + quoted(*dims) + ") is too large");
    bytes *= d;
  }
  const std::int64_t data_bytes = file_bytes - data_offset;
  if (bytes != data_bytes) {
    throw DataError(path + ": truncated or oversized (shape (" + quoted(*dims) + ") needs " + std::to_string(bytes) +
                    " data bytes, found " + std::to_string(data_bytes) + ")");
  }
  if (out.rows() == 0) throw DataError(path + ": has no samples (shape (" + quoted(*dims) + "))");
  if (out.row_bytes() == 0) throw DataError(path + ": its samples are empty (shape (" + quoted(*dims) + "))");
  out.data.resize(static_cast<size_t>(bytes));
  in.read(out.data.data(), bytes);
  if (in.gcount() != bytes) throw DataError(path + ": could not read its " + std::to_string(bytes) + " data bytes");
  return out;
}

std::vector<std::int64_t> labels_of(const NpyArray& y, const std::string& path) {
  if (y.shape.size() != 1) throw DataError(path + ": labels must be one-dimensional");
  std::vector<std::int64_t> labels(static_cast<size_t>(y.rows()));
  for (size_t i = 0; i < labels.size(); ++i) {
    switch (y.dtype) {
      case io::DType::kUInt8: labels[i] = reinterpret_cast<const std::uint8_t*>(y.data.data())[i]; break;
      case io::DType::kUInt16: labels[i] = reinterpret_cast<const std::uint16_t*>(y.data.data())[i]; break;
      case io::DType::kUInt32: labels[i] = reinterpret_cast<const std::uint32_t*>(y.data.data())[i]; break;
      case io::DType::kInt32: labels[i] = reinterpret_cast<const std::int32_t*>(y.data.data())[i]; break;
      case io::DType::kInt64: labels[i] = reinterpret_cast<const std::int64_t*>(y.data.data())[i]; break;
      default: throw DataError(path + ": labels must be integers");
    }
    if (labels[i] < 0 || labels[i] > std::numeric_limits<std::int32_t>::max()) {
      throw DataError(path + ": label " + std::to_string(labels[i]) + " at " + std::to_string(i) +
                      " is not a class index from 0 to 2^31-1");
    }
  }
  return labels;
}

// Float inputs must be finite: a model learns nothing from NaN, and the manifest's mean and
// standard deviation, JSON numbers, would be NaN too.
template <typename Float>
void check_finite(const NpyArray& x, const std::string& path) {
  const auto* values = reinterpret_cast<const Float*>(x.data.data());
  const size_t count = x.data.size() / sizeof(Float);
  const auto bad = std::find_if(values, values + count, [](Float v) { return !std::isfinite(v); });
  if (bad != values + count) {
    const auto per_row = static_cast<size_t>(x.row_bytes()) / sizeof(Float);
    throw DataError(path + ": sample " + std::to_string(static_cast<size_t>(bad - values) / per_row) + " holds " +
                    std::to_string(*bad) + "; inputs must be finite");
  }
}

void check_finite(const NpyArray& x, const std::string& path) {
  if (x.dtype == io::DType::kFloat32) check_finite<float>(x, path);
  if (x.dtype == io::DType::kFloat64) check_finite<double>(x, path);
}

// Mean and standard deviation of the inputs, scaled to [0, 1] first when they are uint8; both
// must fit a double.
std::pair<double, double> input_moments(const NpyArray& x, std::int64_t rows, const std::string& path) {
  const std::int64_t count = rows * x.row_bytes() / static_cast<std::int64_t>(io::dtype_size(x.dtype));
  double sum = 0.0;
  double sum_sq = 0.0;
  for (std::int64_t i = 0; i < count; ++i) {
    double v = 0.0;
    switch (x.dtype) {
      case io::DType::kUInt8: v = reinterpret_cast<const std::uint8_t*>(x.data.data())[i] / 255.0; break;
      case io::DType::kUInt16: v = reinterpret_cast<const std::uint16_t*>(x.data.data())[i]; break;
      case io::DType::kInt32: v = reinterpret_cast<const std::int32_t*>(x.data.data())[i]; break;
      case io::DType::kInt64: v = static_cast<double>(reinterpret_cast<const std::int64_t*>(x.data.data())[i]); break;
      case io::DType::kUInt32: v = reinterpret_cast<const std::uint32_t*>(x.data.data())[i]; break;
      case io::DType::kFloat32: v = reinterpret_cast<const float*>(x.data.data())[i]; break;
      case io::DType::kFloat64: v = reinterpret_cast<const double*>(x.data.data())[i]; break;
    }
    sum += v;
    sum_sq += v * v;
  }
  const double mean = count > 0 ? sum / static_cast<double>(count) : 0.0;
  const double variance = count > 0 ? sum_sq / static_cast<double>(count) - mean * mean : 0.0;
  const double std = variance > 1e-12 ? std::sqrt(variance) : 1.0;
  if (!std::isfinite(mean) || !std::isfinite(std)) {
    throw DataError(path + ": the inputs' mean or standard deviation overflows a double (values near 1e154 "
                    "or beyond); scale them first");
  }
  return {mean, std};
}

}  // namespace

void import_npy(const ImportOptions& options, const std::string& temp_dir, Manifest& manifest) {
  const fs::path source(options.source);
  for (const char* required : {"X.npy", "y.npy"}) {
    if (!fs::is_regular_file(source / required)) {
      throw DataError("'" + options.source + "' has no " + required + " (npy wants X.npy and y.npy, "
                      "optionally X_test.npy and y_test.npy)");
    }
  }
  const NpyArray x = read_npy((source / "X.npy").string());
  check_finite(x, (source / "X.npy").string());
  const NpyArray y = read_npy((source / "y.npy").string());
  const std::vector<std::int64_t> labels = labels_of(y, (source / "y.npy").string());
  if (x.rows() != static_cast<std::int64_t>(labels.size())) {
    throw DataError(options.source + ": X.npy has " + std::to_string(x.rows()) + " samples but y.npy has " +
                    std::to_string(labels.size()) + " labels");
  }
  const bool has_test = fs::is_regular_file(source / "X_test.npy");
  std::int64_t cut = x.rows();  // X/y rows [0, cut) are train, [cut, rows) test when no X_test
  NpyArray x_test;
  std::vector<std::int64_t> test_labels;
  if (has_test) {
    x_test = read_npy((source / "X_test.npy").string());
    check_finite(x_test, (source / "X_test.npy").string());
    test_labels = labels_of(read_npy((source / "y_test.npy").string()), (source / "y_test.npy").string());
    if (std::vector<std::int64_t>(x_test.shape.begin() + 1, x_test.shape.end()) !=
            std::vector<std::int64_t>(x.shape.begin() + 1, x.shape.end()) ||
        x_test.dtype != x.dtype || x_test.rows() != static_cast<std::int64_t>(test_labels.size())) {
      throw DataError(options.source + ": X_test.npy/y_test.npy do not match X.npy/y.npy in dtype, "
                      "sample shape or count");
    }
  } else {
    cut = x.rows() - static_cast<std::int64_t>(std::llround(options.test_fraction * static_cast<double>(x.rows())));
    if (cut < 1 || cut >= x.rows()) {
      throw ConfigError("prepare npy: --test-fraction " + std::to_string(options.test_fraction) +
                        " leaves an empty train or test split of " + std::to_string(x.rows()) + " samples");
    }
  }
  const std::int64_t train_rows = options.limit > 0 ? std::min(cut, options.limit) : cut;

  manifest.name = source.filename().string().empty() ? "npy" : source.filename().string();
  manifest.fields = {{"input", x.dtype, std::vector<std::int64_t>(x.shape.begin() + 1, x.shape.end())},
                     {"label", io::DType::kInt64, {}}};
  std::int64_t max_label = 0;
  for (const auto l : labels) max_label = std::max(max_label, l);
  for (const auto l : test_labels) max_label = std::max(max_label, l);
  manifest.num_classes = max_label + 1;
  std::tie(manifest.input_mean, manifest.input_std) = input_moments(x, train_rows, (source / "X.npy").string());

  manifest.splits["train"] = write_split(temp_dir, "train", manifest.fields, {x.data.data(), labels.data()},
                                         train_rows, options.sharding);
  if (has_test) {
    std::int64_t rows = x_test.rows();
    if (options.limit > 0) rows = std::min(rows, options.limit);
    manifest.splits["test"] = write_split(temp_dir, "test", manifest.fields,
                                          {x_test.data.data(), test_labels.data()}, rows, options.sharding);
  } else {
    std::int64_t rows = x.rows() - cut;
    if (options.limit > 0) rows = std::min(rows, options.limit);
    manifest.splits["test"] = write_split(temp_dir, "test", manifest.fields,
                                          {x.data.data() + cut * x.row_bytes(), labels.data() + cut},
                                          rows, options.sharding);
  }
}

}  // namespace hpctrain::data
