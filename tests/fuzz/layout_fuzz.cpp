// A training shard that HDF5 itself writes from the input's choices, so that it passes HDF5's
// checksums and reaches the checks after them (mutated bytes of a shard rarely do: the `shard`
// target). For the image and the label field the input picks whether it is there, its dtype, its
// shape and row count (often the ones the manifest states), its layout (contiguous, or chunks of
// any row count, with or without checksums, compressed or not) and its values (labels outside
// the manifest's classes among them). The shard replaces the tiny dataset's training shard beside
// its valid manifest and is read by read_dataset_like_a_run; the accepted outcome is an exit-3
// error. An input whose shard HDF5 will not write (chunks of a dataset with a dimension of 0) is
// skipped.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz_target.h"
#include "hpctrain/core/error.h"
#include "hpctrain/io/h5_file.h"
#include "tiny_dataset.h"

namespace hpctrain::fuzz {
namespace {

// The input as a stream of choices; zeros once it is used up.
class Choices {
 public:
  Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  std::uint8_t next() { return used_ < size_ ? data_[used_++] : 0; }
  bool one_in(int n) { return next() % n == 0; }
  // `count` bytes for a field's values: the next `count` of the input, repeated when fewer are
  // left (zeros when none are).
  std::vector<std::uint8_t> bytes(std::size_t count) {
    std::vector<std::uint8_t> out(count);
    const std::size_t taken = std::min(count, size_ - used_);
    for (std::size_t i = 0; i < count && taken > 0; ++i) out[i] = data_[used_ + i % taken];
    used_ += taken;
    return out;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t used_ = 0;
};

constexpr int kDTypes = 6;  // io::DType's values

// One field of the shard, its shape `stated` per sample as the manifest has it.
void write_field(io::H5File& file, const std::string& name, io::DType stated_dtype,
                 const std::vector<std::int64_t>& stated, Choices& in) {
  if (in.one_in(8)) return;  // missing
  const auto dtype = in.one_in(2) ? stated_dtype : static_cast<io::DType>(in.next() % kDTypes);
  std::vector<std::int64_t> shape{in.one_in(2) ? kTinyTrainSamples : in.next() % 24};
  if (in.one_in(2)) {
    shape.insert(shape.end(), stated.begin(), stated.end());
  } else {
    for (int d = in.next() % 4; d > 0; --d) shape.push_back(in.next() % 6);
  }
  std::int64_t elements = 1;  // at most 23 * 5^3
  for (const std::int64_t d : shape) elements *= d;
  io::WriteOptions options;
  options.chunk_rows = in.one_in(4) ? 0 : in.next() % 16;
  options.fletcher32 = !in.one_in(4);
  options.deflate_level = in.one_in(3) ? 1 + in.next() % 9 : 0;
  const std::vector<std::uint8_t> values = in.bytes(static_cast<std::size_t>(elements) * io::dtype_size(dtype));
  file.write(name, dtype, shape, values.data(), options);
}

}  // namespace

void write_seeds(const std::string& dir) {
  // Choices that make a valid shard, field by field: there, in the stated dtype, rows and shape,
  // chunks of 8 rows with checksums, uncompressed; then its values (pixels; labels 0..2, int64).
  std::filesystem::create_directories(dir);
  const std::string choices{1, 0, 0, 0, 1, 8, 1, 1};
  std::string pixels(static_cast<std::size_t>(kTinyTrainSamples) * 16, '\0');
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<char>(i * 7);
  std::string labels(static_cast<std::size_t>(kTinyTrainSamples) * 8, '\0');
  for (std::int64_t i = 0; i < kTinyTrainSamples; ++i) {
    labels[static_cast<std::size_t>(i * 8)] = static_cast<char>(i % 3);
  }
  write_file(dir + "/valid-shard", choices + pixels + choices + labels);
}

}  // namespace hpctrain::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hpctrain;
  static const std::string dir = [] {
    fuzz::silence_logs();
    const std::string path = fuzz::scratch_dir() + "/dataset";
    fuzz::write_tiny_dataset(path);
    return path;
  }();
  fuzz::Choices in(data, size);
  try {
    io::H5File file = io::H5File::create(dir + "/" + fuzz::kTinyTrainShard, ExitCode::kData);
    fuzz::write_field(file, "image", io::DType::kUInt8, fuzz::kTinyImageShape, in);
    fuzz::write_field(file, "label", io::DType::kInt64, {}, in);
    file.close();
  } catch (const Error& e) {  // HDF5 would not write it: not a file a user can have
    if (e.code() != ExitCode::kData) throw;
    fuzz::record(fuzz::Outcome::kRefused);
    fuzz::expect_no_open_hdf5_objects();
    return 0;
  }
  try {
    fuzz::read_dataset_like_a_run(dir);
    fuzz::record(fuzz::Outcome::kAccepted);
  } catch (const Error& e) {
    if (e.code() != ExitCode::kData) throw;
    fuzz::record(fuzz::Outcome::kRefused);  // with a message: what a user sees
  }
  fuzz::expect_no_open_hdf5_objects();
  return 0;
}
