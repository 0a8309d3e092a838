#include "hpctrain/data/split.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>

#include "hpctrain/data/dataset_check.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/io/collective_file.h"

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

// Note [Block cache]: when a split fits in data.cache_mb, its rows are read in blocks of about
// 1 MiB, each block once, and kept decoded in memory; a batch is then copied row by row from
// memory, so shuffled order costs what file order costs. A split larger than the budget is read
// per batch instead, adjacent samples as one hyperslab each, through HDF5's chunk cache.
struct Split::State {
  struct Block {
    std::vector<std::uint8_t> input;  // rows in memory dtype, back to back
    std::vector<std::int64_t> labels;
  };
  struct Shard {
    std::int64_t first = 0;  // index of its first sample within the split
    std::int64_t samples = 0;
    io::H5File file;
    io::H5Dataset input;
    io::H5Dataset label;
    mutable std::vector<std::unique_ptr<const Block>> blocks;  // loaded on first use
  };
  Manifest manifest;
  FieldSpec input_field;
  std::vector<Shard> shards;
  std::int64_t samples = 0;
  std::int64_t row_bytes = 0;  // one sample's input in memory dtype
  bool cache_blocks = false;
  std::int64_t block_rows = 1;
  mutable std::mutex blocks_mutex;  // guards the lazily filled blocks (io serializes HDF5 calls)

  const Block& block(const Shard& shard, std::int64_t b) const {
    const std::lock_guard<std::mutex> lock(blocks_mutex);
    if (!shard.blocks[static_cast<size_t>(b)]) {
      auto loaded = std::make_unique<Block>();
      const std::int64_t first = b * block_rows;
      const std::int64_t rows = std::min(block_rows, shard.samples - first);
      loaded->input.resize(static_cast<size_t>(rows * row_bytes));
      loaded->labels.resize(static_cast<size_t>(rows));
      shard.input.read_rows(memory_dtype(input_field.dtype), first, rows, loaded->input.data());
      shard.label.read_rows(io::DType::kInt64, first, rows, loaded->labels.data());
      check_labels(loaded->labels.data(), rows);
      shard.blocks[static_cast<size_t>(b)] = std::move(loaded);
    }
    return *shard.blocks[static_cast<size_t>(b)];
  }

  void check_labels(const std::int64_t* labels, std::int64_t count) const {
    if (manifest.num_classes <= 0) return;
    for (std::int64_t i = 0; i < count; ++i) {
      if (labels[i] < 0 || labels[i] >= manifest.num_classes) {
        throw DataError("dataset '" + manifest.name + "' has a label " + std::to_string(labels[i]) +
                        " outside [0, " + std::to_string(manifest.num_classes) + ")");
      }
    }
  }

  void check_index(std::int64_t index) const {
    if (index < 0 || index >= samples) {
      throw DataError("sample index " + std::to_string(index) + " is outside the split's " +
                      std::to_string(samples) + " samples");
    }
  }

  void gather_cached(const std::vector<std::int64_t>& indices, std::uint8_t* input,
                     std::int64_t* target) const;
  void gather_runs(const std::vector<std::int64_t>& indices, at::Tensor& raw, at::Tensor& target) const;

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
  state->row_bytes = row_bytes(state->input_field) / io::dtype_size(state->input_field.dtype) *
                     io::dtype_size(memory_dtype(state->input_field.dtype));
  state->block_rows = std::max<std::int64_t>(1, (std::int64_t{1} << 20) / state->row_bytes);
  const std::int64_t split_bytes = spec.samples() * (state->row_bytes + 8);
  state->cache_blocks = split_bytes <= cache_bytes;
  for (const auto& shard : spec.shards) {
    const std::string path = (std::filesystem::path(dataset_dir) / shard.file).string();
    if (!std::filesystem::exists(path)) throw DataError(path + ": shard listed in the manifest is missing");
    io::H5File file = io::H5File::open_read(path, ExitCode::kData);
    check_shard_field(file, shard, state->input_field);
    check_shard_field(file, shard, label_field);
    // Blocks are read once: HDF5 then needs no cache beyond the chunks one block spans. Otherwise
    // the budget is shared by the shards in proportion to their size.
    const std::int64_t share = state->cache_blocks
                                   ? std::int64_t{4} << 20
                                   : cache_bytes * shard.samples / std::max<std::int64_t>(1, spec.samples());
    io::H5Dataset input = file.open_dataset(state->input_field.name, share);
    io::H5Dataset label = file.open_dataset(label_field.name, std::int64_t{1} << 20);
    const std::int64_t blocks = state->cache_blocks ? (shard.samples + state->block_rows - 1) / state->block_rows : 0;
    state->shards.push_back(State::Shard{state->samples, shard.samples, std::move(file),
                                         std::move(input), std::move(label),
                                         std::vector<std::unique_ptr<const State::Block>>(static_cast<size_t>(blocks))});
    state->samples += shard.samples;
  }
  Split out;
  out.state_ = std::move(state);
  return out;
}

std::int64_t Split::size() const { return state_->samples; }
const Manifest& Split::manifest() const { return state_->manifest; }
std::vector<std::int64_t> Split::sample_shape() const { return state_->input_field.shape; }

void Split::State::gather_cached(const std::vector<std::int64_t>& indices, std::uint8_t* input,
                                 std::int64_t* target) const {
  const auto row = static_cast<size_t>(row_bytes);
  for (size_t k = 0; k < indices.size();) {
    const std::int64_t index = indices[k];
    check_index(index);
    const Shard& shard = shard_of(index);
    const std::int64_t local = index - shard.first;
    const Block& b = block(shard, local / block_rows);
    const std::int64_t offset = local % block_rows;
    // Consecutive indices in the same block are copied as one run (file order: whole blocks).
    std::int64_t run = 1;
    const auto block_left = static_cast<std::int64_t>(b.labels.size()) - offset;
    while (run < block_left && k + static_cast<size_t>(run) < indices.size() &&
           indices[k + static_cast<size_t>(run)] == index + run) {
      ++run;
    }
    std::memcpy(input, b.input.data() + static_cast<size_t>(offset) * row, static_cast<size_t>(run) * row);
    std::memcpy(target, b.labels.data() + offset, static_cast<size_t>(run) * sizeof(std::int64_t));
    input += static_cast<size_t>(run) * row;
    target += run;
    k += static_cast<size_t>(run);
  }
}

void Split::State::gather_runs(const std::vector<std::int64_t>& indices, at::Tensor& raw,
                               at::Tensor& target) const {
  // Visit the batch in index order, so adjacent samples form runs read as one hyperslab each.
  std::vector<std::int64_t> by_index(indices.size());
  std::iota(by_index.begin(), by_index.end(), 0);
  std::stable_sort(by_index.begin(), by_index.end(),
                   [&](std::int64_t a, std::int64_t b) { return indices[a] < indices[b]; });
  const auto row = static_cast<size_t>(row_bytes);
  std::vector<std::uint8_t> rows;
  std::vector<std::int64_t> labels;
  auto* out = static_cast<std::uint8_t*>(raw.data_ptr());
  auto* out_target = target.data_ptr<std::int64_t>();
  for (size_t begin = 0; begin < by_index.size();) {
    const std::int64_t first = indices[by_index[begin]];
    check_index(first);
    const Shard& shard = shard_of(first);
    size_t end = begin + 1;
    while (end < by_index.size() && indices[by_index[end]] == indices[by_index[end - 1]] + 1 &&
           indices[by_index[end]] < shard.first + shard.samples) {
      ++end;
    }
    const auto run = static_cast<std::int64_t>(end - begin);
    rows.resize(static_cast<size_t>(run) * row);
    labels.resize(static_cast<size_t>(run));
    shard.input.read_rows(memory_dtype(input_field.dtype), first - shard.first, run, rows.data());
    shard.label.read_rows(io::DType::kInt64, first - shard.first, run, labels.data());
    check_labels(labels.data(), run);
    for (size_t k = begin; k < end; ++k) {
      const auto slot = static_cast<size_t>(by_index[k]);
      std::memcpy(out + slot * row, rows.data() + (k - begin) * row, row);
      out_target[slot] = labels[k - begin];
    }
    begin = end;
  }
}

Batch Split::gather(const std::vector<std::int64_t>& indices, bool pinned) const {
  const State& s = *state_;
  const auto count = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> shape{count};
  shape.insert(shape.end(), s.input_field.shape.begin(), s.input_field.shape.end());
  const auto options = at::TensorOptions().pinned_memory(pinned);
  at::Tensor raw = at::empty(shape, options.dtype(scalar_type(s.input_field.dtype)));
  at::Tensor target = at::empty({count}, options.dtype(at::kLong));
  if (s.cache_blocks) {
    s.gather_cached(indices, static_cast<std::uint8_t*>(raw.data_ptr()), target.data_ptr<std::int64_t>());
  } else {
    s.gather_runs(indices, raw, target);
  }
  return {raw, target};
}

at::Tensor Split::normalize(const at::Tensor& raw) const {
  const Manifest& m = state_->manifest;
  // A copy also when `raw` is float32 already (to() would return `raw` itself): never in place.
  at::Tensor input = raw.scalar_type() == at::kFloat ? raw.clone() : raw.to(at::kFloat);
  // Integer pixels are scaled to [0, 1] first, as torchvision's ToTensor does.
  if (raw.scalar_type() == at::kByte) input.div_(255.0);
  return input.sub_(m.input_mean).div_(m.input_std);
}

bool Split::caches_blocks() const { return state_->cache_blocks; }

void Split::preload() const {
  const State& s = *state_;
  HT_CHECK(s.cache_blocks, "preload of a split that is not held in memory");
  for (const State::Shard& shard : s.shards) {
    for (size_t b = 0; b < shard.blocks.size(); ++b) s.block(shard, static_cast<std::int64_t>(b));
  }
}

void Split::preload_collective() const {
  const State& s = *state_;
  HT_CHECK(s.cache_blocks, "preload of a split that is not held in memory");
  const FieldSpec& label = s.manifest.field("label");
  for (const State::Shard& shard : s.shards) {
    const io::CollectiveFile file = io::CollectiveFile::open(shard.file.path(), ExitCode::kData);
    std::vector<std::uint8_t> input(static_cast<size_t>(shard.samples * s.row_bytes));
    std::vector<std::int64_t> labels(static_cast<size_t>(shard.samples));
    file.read_rows_everywhere(s.input_field.name, memory_dtype(s.input_field.dtype), 0, shard.samples,
                              input.data());
    file.read_rows_everywhere(label.name, io::DType::kInt64, 0, shard.samples, labels.data());
    s.check_labels(labels.data(), shard.samples);
    for (size_t b = 0; b < shard.blocks.size(); ++b) {
      const std::int64_t first = static_cast<std::int64_t>(b) * s.block_rows;
      const std::int64_t rows = std::min(s.block_rows, shard.samples - first);
      auto block = std::make_unique<State::Block>();
      block->input.assign(input.begin() + first * s.row_bytes, input.begin() + (first + rows) * s.row_bytes);
      block->labels.assign(labels.begin() + first, labels.begin() + first + rows);
      shard.blocks[b] = std::move(block);
    }
  }
}

Batch Split::range(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> indices(static_cast<size_t>(count));
  std::iota(indices.begin(), indices.end(), first);
  return gather(indices);
}

}  // namespace hpctrain::data
