#include "hpctrain/data/split.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "hpctrain/data/dataset_check.h"
#include "hpctrain/data/shard_writer.h"

namespace hpctrain::data {
namespace {

// uint16 (token ids) has no libtorch 1.13 dtype: such fields are widened to int32 while read.
at::ScalarType scalar_type(io::DType dtype) {
  switch (dtype) {
    case io::DType::kUInt8: return at::kByte;
    case io::DType::kUInt16: return at::kInt;
    case io::DType::kInt32: return at::kInt;
    case io::DType::kInt64: return at::kLong;
    case io::DType::kFloat32: return at::kFloat;
    case io::DType::kFloat64: return at::kDouble;
  }
  return at::kByte;
}

io::DType memory_dtype(io::DType stored) {
  return stored == io::DType::kUInt16 ? io::DType::kInt32 : stored;
}

}  // namespace

struct Split::State {
  struct Shard {
    std::int64_t first = 0;  // index of its first sample within the split
    std::int64_t samples = 0;
    io::H5File file;
    io::H5Dataset input;
    io::H5Dataset label;
  };
  Manifest manifest;
  FieldSpec input_field;
  std::vector<Shard> shards;
  std::int64_t samples = 0;

  const Shard& shard_of(std::int64_t index) const {
    const auto it = std::upper_bound(shards.begin(), shards.end(), index,
                                     [](std::int64_t i, const Shard& s) { return i < s.first; });
    return *(it - 1);
  }
};

Split Split::load(const std::string& dataset_dir, const std::string& split_name,
                  std::int64_t cache_bytes) {
  auto state = std::make_shared<State>();
  state->manifest = Manifest::load(dataset_dir);
  const Manifest& m = state->manifest;
  const SplitSpec& spec = m.split(split_name);
  if (spec.samples() == 0) throw DataError(dataset_dir + ": split '" + split_name + "' is empty");
  if (m.fields.size() < 2) {
    throw DataError(dataset_dir + ": '" + m.name + "' has no input and 'label' fields "
                    "(a token stream?); the built-in models are classifiers that need both");
  }
  state->input_field = m.fields.front();
  const FieldSpec& label_field = m.field("label");
  if (!label_field.shape.empty()) throw DataError(dataset_dir + ": 'label' must be a scalar per sample");
  // The cache budget is shared by the shards in proportion to their size.
  const std::int64_t split_bytes = spec.samples() * row_bytes(state->input_field);
  for (const auto& shard : spec.shards) {
    const std::string path = (std::filesystem::path(dataset_dir) / shard.file).string();
    if (!std::filesystem::exists(path)) throw DataError(path + ": shard listed in the manifest is missing");
    io::H5File file = io::H5File::open_read(path, ExitCode::kData);
    check_shard_field(file, shard, state->input_field);
    check_shard_field(file, shard, label_field);
    const std::int64_t share = cache_bytes * (shard.samples * row_bytes(state->input_field)) /
                               std::max<std::int64_t>(1, split_bytes);
    io::H5Dataset input = file.open_dataset(state->input_field.name, share);
    io::H5Dataset label = file.open_dataset(label_field.name, std::int64_t{1} << 20);
    state->shards.push_back(
        State::Shard{state->samples, shard.samples, std::move(file), std::move(input), std::move(label)});
    state->samples += shard.samples;
  }
  Split out;
  out.state_ = std::move(state);
  return out;
}

std::int64_t Split::size() const { return state_->samples; }
const Manifest& Split::manifest() const { return state_->manifest; }
std::vector<std::int64_t> Split::sample_shape() const { return state_->input_field.shape; }

Batch Split::gather(const std::vector<std::int64_t>& indices) const {
  const State& s = *state_;
  const auto count = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> shape{count};
  shape.insert(shape.end(), s.input_field.shape.begin(), s.input_field.shape.end());
  at::Tensor raw = at::empty(shape, at::TensorOptions().dtype(scalar_type(s.input_field.dtype)));
  at::Tensor target = at::empty({count}, at::TensorOptions().dtype(at::kLong));

  // Visit the batch in index order, so adjacent samples form runs read as one hyperslab each.
  std::vector<std::int64_t> by_index(indices.size());
  std::iota(by_index.begin(), by_index.end(), 0);
  std::stable_sort(by_index.begin(), by_index.end(),
                   [&](std::int64_t a, std::int64_t b) { return indices[a] < indices[b]; });
  for (size_t begin = 0; begin < by_index.size();) {
    const std::int64_t first = indices[by_index[begin]];
    if (first < 0 || first >= s.samples) {
      throw DataError("sample index " + std::to_string(first) + " is outside the split's " +
                      std::to_string(s.samples) + " samples");
    }
    const State::Shard& shard = s.shard_of(first);
    size_t end = begin + 1;
    while (end < by_index.size() && indices[by_index[end]] == indices[by_index[end - 1]] + 1 &&
           indices[by_index[end]] < shard.first + shard.samples) {
      ++end;
    }
    const auto run = static_cast<std::int64_t>(end - begin);
    std::vector<std::int64_t> run_shape = shape;
    run_shape[0] = run;
    at::Tensor rows = at::empty(run_shape, raw.options());
    at::Tensor labels = at::empty({run}, target.options());
    shard.input.read_rows(memory_dtype(s.input_field.dtype), first - shard.first, run, rows.data_ptr());
    shard.label.read_rows(io::DType::kInt64, first - shard.first, run, labels.data_ptr());
    const at::Tensor slots = at::tensor(std::vector<std::int64_t>(by_index.begin() + begin, by_index.begin() + end),
                                        at::TensorOptions().dtype(at::kLong));
    raw.index_copy_(0, slots, rows);
    target.index_copy_(0, slots, labels);
    begin = end;
  }
  if (s.manifest.num_classes > 0 && count > 0 &&
      (target.min().item<std::int64_t>() < 0 || target.max().item<std::int64_t>() >= s.manifest.num_classes)) {
    throw DataError("dataset '" + s.manifest.name + "' has a label outside [0, " +
                    std::to_string(s.manifest.num_classes) + ")");
  }
  at::Tensor input = raw.to(at::kFloat);
  // Integer pixels are scaled to [0, 1] first, as torchvision's ToTensor does.
  if (raw.scalar_type() == at::kByte) input.div_(255.0);
  input.sub_(s.manifest.input_mean).div_(s.manifest.input_std);
  return {input, target};
}

Batch Split::range(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> indices(static_cast<size_t>(count));
  std::iota(indices.begin(), indices.end(), first);
  return gather(indices);
}

}  // namespace hpctrain::data
