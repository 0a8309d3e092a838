// The importers of `hpctrain prepare` that parse binary headers: IDX (fashion-mnist, mnist) and
// NPY. The input's first byte picks the file of a small valid source that the rest of the input
// replaces (modulo 4: fashion-mnist's training images, its training labels, npy's X.npy, its
// y.npy), and the source is imported as `hpctrain prepare` does. An import that succeeds must
// give a dataset that reads like a run; one that is refused must leave nothing at --out, neither
// a dataset nor a temporary directory beside it.
#include <array>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/core/system.h"
#include "hpctrain/data/importers.h"
#include "tiny_dataset.h"

namespace hpctrain::fuzz {
namespace fs = std::filesystem;
namespace {

std::string big_endian(std::uint32_t value) {
  return {static_cast<char>(value >> 24), static_cast<char>(value >> 16), static_cast<char>(value >> 8),
          static_cast<char>(value)};
}

// An IDX file of uint8: magic 0x00000800 | ndim, the sizes big-endian, then the bytes 0, 1, ...
// (labels below 10).
std::string idx_file(const std::vector<std::uint32_t>& dims) {
  std::string out = big_endian(0x0800u | static_cast<std::uint32_t>(dims.size()));
  std::uint32_t count = 1;
  for (const std::uint32_t d : dims) {
    out += big_endian(d);
    count *= d;
  }
  for (std::uint32_t i = 0; i < count; ++i) out += static_cast<char>(dims.size() == 1 ? i % 10 : i);
  return out;
}

// A version-1 .npy file: magic, version, header length, the header dict padded with spaces to a
// multiple of 64 bytes and ending in a newline, then `data`.
std::string npy_file(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header += '\n';
  const auto length = static_cast<std::uint16_t>(header.size());
  return std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(length & 0xff) + static_cast<char>(length >> 8) +
         header + data;
}

std::string float32s(const std::vector<float>& values) {
  std::string out(values.size() * sizeof(float), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

std::string int64s(const std::vector<std::int64_t>& values) {
  std::string out(values.size() * sizeof(std::int64_t), '\0');
  std::memcpy(out.data(), values.data(), out.size());
  return out;
}

struct SourceFile {
  const char* format;  // the importer
  const char* name;    // the file the input replaces
};

// Indexed by the input's first byte, modulo 4.
constexpr std::array<SourceFile, 4> kFuzzed{{{"fashion-mnist", "train-images-idx3-ubyte"},
                                              {"fashion-mnist", "train-labels-idx1-ubyte"},
                                              {"npy", "X.npy"},
                                              {"npy", "y.npy"}}};

// Every file of the valid source of `format`: 6 training and 2 test images of 3x2 pixels; 10
// samples of 2x3 float32 with int64 labels, 2 of them the test split.
std::vector<std::pair<std::string, std::string>> valid_source(const std::string& format) {
  if (format == "npy") {
    std::vector<float> x(60);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 3.0f;
    return {{"X.npy", npy_file("<f4", "(10, 2, 3)", float32s(x))},
            {"y.npy", npy_file("<i8", "(10,)", int64s({0, 1, 2, 0, 1, 2, 0, 1, 2, 0}))}};
  }
  return {{"train-images-idx3-ubyte", idx_file({6, 3, 2})},
          {"train-labels-idx1-ubyte", idx_file({6})},
          {"t10k-images-idx3-ubyte", idx_file({2, 3, 2})},
          {"t10k-labels-idx1-ubyte", idx_file({2})}};
}

std::string source_dir(const std::string& format) { return scratch_dir() + "/source-" + format; }

}  // namespace

void write_seeds(const std::string& dir) {
  fs::create_directories(dir);
  for (size_t pick = 0; pick < kFuzzed.size(); ++pick) {
    for (const auto& [name, bytes] : valid_source(kFuzzed[pick].format)) {
      if (name != kFuzzed[pick].name) continue;
      write_file(dir + "/" + kFuzzed[pick].format + "-" + name, static_cast<char>(pick) + bytes);
    }
  }
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  namespace fs = std::filesystem;
  fuzz::silence_logs();
  if (size == 0) {
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  const fuzz::SourceFile& fuzzed = fuzz::kFuzzed[data[0] % fuzz::kFuzzed.size()];
  const std::string source = fuzz::source_dir(fuzzed.format);
  fs::create_directories(source);
  for (const auto& [name, bytes] : fuzz::valid_source(fuzzed.format)) {
    fuzz::write_file(source + "/" + name, bytes);
  }
  fuzz::write_file(source + "/" + fuzzed.name, data + 1, size - 1);

  const std::string parent = fuzz::scratch_dir() + "/prepared";
  sys::remove_tree(parent);
  fs::create_directories(parent);
  data::ImportOptions options;
  options.source = source;
  options.out = parent + "/dataset";
  options.test_fraction = 0.2;
  try {
    data::import_dataset(fuzzed.format, options);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;  // the options are fixed: only the source can be wrong
    if (!fs::is_empty(parent)) {
      throw std::logic_error("a refused import left " + fs::directory_iterator(parent)->path().string());
    }
    fuzz::expect_no_open_hdf5_objects();
    fuzz::record(fuzz::Outcome::kRefused);
    return 0;
  }
  for (const auto& entry : fs::directory_iterator(parent)) {
    if (entry.path() != options.out) throw std::logic_error("an import left " + entry.path().string() + " beside it");
  }
  fuzz::read_dataset_like_a_run(options.out);  // what prepare wrote must read: any error is a finding
  fuzz::expect_no_open_hdf5_objects();
  fuzz::record(fuzz::Outcome::kAccepted);
  return 0;
}
