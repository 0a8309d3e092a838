#include "hpctrain/data/split.h"

#include <ATen/ATen.h>

#include <filesystem>

#include "hpctrain/data/dataset_check.h"

namespace hpctrain::data {
namespace {

at::ScalarType scalar_type(io::DType dtype) {
  switch (dtype) {
    case io::DType::kUInt8: return at::kByte;
    case io::DType::kUInt16: return at::kInt;  // libtorch 1.13 has no uint16; widened on read
    case io::DType::kInt32: return at::kInt;
    case io::DType::kInt64: return at::kLong;
    case io::DType::kFloat32: return at::kFloat;
    case io::DType::kFloat64: return at::kDouble;
  }
  return at::kByte;
}

// Reads field `spec` of every shard into one tensor [samples, ...shape], checking each shard
// against the manifest.
at::Tensor read_field(const std::string& dir, const SplitSpec& split, const FieldSpec& spec) {
  std::vector<std::int64_t> shape{split.samples()};
  shape.insert(shape.end(), spec.shape.begin(), spec.shape.end());
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(scalar_type(spec.dtype)));
  const std::int64_t row_bytes = out.numel() == 0 ? 0 : out.nbytes() / split.samples();
  std::int64_t row = 0;
  for (const auto& shard : split.shards) {
    const std::string path = (std::filesystem::path(dir) / shard.file).string();
    if (!std::filesystem::exists(path)) {
      throw DataError(path + ": shard listed in the manifest is missing");
    }
    const io::H5File file = io::H5File::open_read(path, ExitCode::kData);
    check_shard_field(file, shard, spec);
    // uint16 (token ids) has no libtorch 1.13 dtype: HDF5 widens it to int32 while reading.
    const io::DType memory = spec.dtype == io::DType::kUInt16 ? io::DType::kInt32 : spec.dtype;
    file.read(spec.name, memory, static_cast<char*>(out.data_ptr()) + row * row_bytes);
    row += shard.samples;
  }
  return out;
}

}  // namespace

Split Split::load(const std::string& dataset_dir, const std::string& split_name) {
  Split s;
  s.manifest_ = Manifest::load(dataset_dir);
  const SplitSpec& spec = s.manifest_.split(split_name);
  if (spec.samples() == 0) throw DataError(dataset_dir + ": split '" + split_name + "' is empty");
  if (s.manifest_.fields.size() < 2) {
    throw DataError(dataset_dir + ": '" + s.manifest_.name + "' has no input and 'label' fields "
                    "(a token stream?); the built-in models are classifiers that need both");
  }
  s.inputs_ = read_field(dataset_dir, spec, s.manifest_.fields.front());
  s.targets_ = read_field(dataset_dir, spec, s.manifest_.field("label")).to(at::kLong);
  if (s.targets_.dim() != 1) throw DataError(dataset_dir + ": 'label' must be a scalar per sample");
  if (s.manifest_.num_classes > 0 && s.targets_.numel() > 0) {
    const auto low = s.targets_.min().item<std::int64_t>();
    const auto high = s.targets_.max().item<std::int64_t>();
    if (low < 0 || high >= s.manifest_.num_classes) {
      throw DataError(dataset_dir + ": labels of split '" + split_name + "' lie outside [0, " +
                      std::to_string(s.manifest_.num_classes) + ")");
    }
  }
  return s;
}

std::vector<std::int64_t> Split::sample_shape() const {
  const auto sizes = inputs_.sizes();
  return std::vector<std::int64_t>(sizes.begin() + 1, sizes.end());
}

Batch Split::to_batch(const at::Tensor& raw_inputs, const at::Tensor& targets) const {
  at::Tensor input = raw_inputs.to(at::kFloat);
  // Integer pixels are scaled to [0, 1] first, as torchvision's ToTensor does.
  if (raw_inputs.scalar_type() == at::kByte) input.div_(255.0);
  input.sub_(manifest_.input_mean).div_(manifest_.input_std);
  return {input, targets};
}

Batch Split::gather(const std::vector<std::int64_t>& indices) const {
  const at::Tensor index =
      at::from_blob(const_cast<std::int64_t*>(indices.data()),
                    {static_cast<std::int64_t>(indices.size())}, at::TensorOptions().dtype(at::kLong));
  return to_batch(inputs_.index_select(0, index), targets_.index_select(0, index));
}

Batch Split::range(std::int64_t first, std::int64_t count) const {
  return to_batch(inputs_.narrow(0, first, count), targets_.narrow(0, first, count));
}

}  // namespace hpctrain::data
