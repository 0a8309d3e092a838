#include "hpctrain/data/split.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <list>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>

#include "hpctrain/data/batch_pool.h"
#include "hpctrain/data/dataset_check.h"
#include "hpctrain/data/shard_writer.h"
#include "hpctrain/io/collective_file.h"
#include "hpctrain/io/mapped_file.h"

namespace hpctrain::data {
namespace {

// uint16 and uint32 (token ids) have no libtorch 1.13 dtype: such fields are widened to int32 and
// int64 while read.
at::ScalarType scalar_type(io::DType dtype) {
  switch (dtype) {
    case io::DType::kUInt8: return at::kByte;
    case io::DType::kUInt16: return at::kInt;
    case io::DType::kUInt32: return at::kLong;
    case io::DType::kInt32: return at::kInt;
    case io::DType::kInt64: return at::kLong;
    case io::DType::kFloat32: return at::kFloat;
    case io::DType::kFloat64: return at::kDouble;
  }
  return at::kByte;
}

io::DType memory_dtype(io::DType stored) {
  if (stored == io::DType::kUInt16) return io::DType::kInt32;
  if (stored == io::DType::kUInt32) return io::DType::kInt64;
  return stored;
}

// One sample's input in memory dtype.
std::int64_t memory_row_bytes(const FieldSpec& input) {
  return row_bytes(input) / io::dtype_size(input.dtype) * io::dtype_size(memory_dtype(input.dtype));
}

// A block in the cache: its inputs and int64 labels.
constexpr std::int64_t kLabelBytes = sizeof(std::int64_t);

std::int64_t block_bytes(const FieldSpec& input) { return chunk_rows(input) * (memory_row_bytes(input) + kLabelBytes); }

}  // namespace

// Note [Block cache]: a split is read in blocks of consecutive rows, one HDF5 chunk of the input
// field each (about 1 MiB; data::chunk_rows), kept decoded in memory; a batch is copied row by row
// from its blocks. When the whole split fits in data.cache_mb, every block is read once and kept, so
// shuffled order costs what file order costs. A larger split keeps the cache_mb most recently used
// blocks: read in file order, or shuffled by blocks (data.shuffle_window_mb, the sampler's window
// of blocks within the cache), each block is still read once per epoch; in a global shuffle almost
// every sample costs a block read. Blocks are shared_ptrs, so one evicted while another thread
// copies from it lives until that copy ends. A block of a split held whole is never evicted, so
// it is also published as a plain pointer (`resident`) that gather reads without taking the lock.
struct Split::State {
  struct Block {
    // Rows in memory dtype, back to back: in `owned`, or in a mapped shard file (Note [Mapped
    // shards]).
    const std::uint8_t* input = nullptr;
    // Not zeroed first. A block read from a file whose chunks are the blocks has room for the
    // stored chunk, so io reads it in place (Note [Raw chunk reads]).
    std::unique_ptr<std::uint8_t[]> owned;
    std::vector<std::int64_t> labels;
  };
  struct Shard {
    std::int64_t first = 0;  // index of its first sample within the split
    std::int64_t samples = 0;
    std::int64_t first_block = 0;  // index of its first block among the split's
    io::H5File file;
    io::H5Dataset input;
    io::H5Dataset label;
    std::optional<io::MappedFile> mapped;     // ShardAccess::kMap: the file
    std::vector<std::int64_t> chunk_offsets;  // and where each block's stored chunk is in it
  };
  Manifest manifest;
  FieldSpec input_field;
  std::vector<Shard> shards;
  std::int64_t samples = 0;
  std::int64_t row_bytes = 0;  // one sample's input in memory dtype
  std::int64_t block_rows = 1;
  bool mapped = false;             // inputs read from the mapped shard files
  std::int64_t cached_block_bytes = 0;  // what one block costs the cache budget
  bool whole_split = false;        // every block fits in the budget: none is ever evicted
  std::int64_t capacity = 0;       // blocks held at most
  mutable std::mutex blocks_mutex;  // guards the members below (io serializes HDF5 calls)
  mutable std::vector<std::shared_ptr<const Block>> blocks;  // by split-wide block index
  mutable std::list<std::int64_t> recency;                   // held blocks, most recently used first
  mutable std::vector<std::list<std::int64_t>::iterator> recency_position;
  mutable std::int64_t blocks_read = 0;
  std::string not_mapped;  // ShardAccess::kMap asked for, and why the files are read instead
  // whole_split only: each block once read, by split-wide index; read without blocks_mutex.
  std::unique_ptr<std::atomic<const Block*>[]> resident;
  std::shared_ptr<BatchPool> batch_memory = BatchPool::make();  // gather's tensors (Note [Batch memory])

  // Block b of `shard`, read first if it is not held. The read runs outside blocks_mutex, so loader
  // threads read and check blocks at once (io still makes one HDF5 call at a time); two threads
  // that miss the same block both read it, and the first to finish keeps it.
  std::shared_ptr<const Block> block(const Shard& shard, std::int64_t b) const {
    const auto id = static_cast<size_t>(shard.first_block + b);
    {
      const std::lock_guard<std::mutex> lock(blocks_mutex);
      if (const std::shared_ptr<const Block>& held = blocks[id]) {
        recency.splice(recency.begin(), recency, recency_position[id]);
        return held;
      }
    }
    std::shared_ptr<const Block> loaded = read_block(shard, b);
    const std::lock_guard<std::mutex> lock(blocks_mutex);
    if (const std::shared_ptr<const Block>& held = blocks[id]) {
      recency.splice(recency.begin(), recency, recency_position[id]);
      return held;
    }
    ++blocks_read;
    hold(static_cast<std::int64_t>(id), loaded);
    return loaded;
  }

  std::shared_ptr<const Block> read_block(const Shard& shard, std::int64_t b) const {
    auto loaded = std::make_shared<Block>();
    const std::int64_t first = b * block_rows;
    const std::int64_t rows = std::min(block_rows, shard.samples - first);
    if (mapped) {
      loaded->input = shard.mapped->data() + shard.chunk_offsets[static_cast<size_t>(b)];
      shard.input.check_raw_chunk(loaded->input, first, rows);
    } else {
      const std::int64_t input_bytes = shard.input.raw_chunk_rows() == block_rows
                                           ? std::max(rows * row_bytes, shard.input.raw_chunk_bytes())
                                           : rows * row_bytes;
      loaded->owned.reset(new std::uint8_t[static_cast<size_t>(input_bytes)]);
      loaded->input = loaded->owned.get();
      shard.input.read_rows(memory_dtype(input_field.dtype), first, rows, loaded->owned.get(), input_bytes);
    }
    loaded->labels.resize(static_cast<size_t>(rows));
    shard.label.read_rows(io::DType::kInt64, first, rows, loaded->labels.data());
    check_labels(loaded->labels.data(), rows);
    return loaded;
  }

  // Caller holds blocks_mutex.
  void hold(std::int64_t id, std::shared_ptr<const Block> block) const {
    if (whole_split) resident[static_cast<size_t>(id)].store(block.get(), std::memory_order_release);
    blocks[static_cast<size_t>(id)] = std::move(block);
    recency.push_front(id);
    recency_position[static_cast<size_t>(id)] = recency.begin();
    if (static_cast<std::int64_t>(recency.size()) > capacity) {
      blocks[static_cast<size_t>(recency.back())].reset();
      recency.pop_back();
    }
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

  void gather_rows(const std::vector<std::int64_t>& indices, std::uint8_t* input, std::int64_t* target) const;

  void map_shards();

  const Shard& shard_of(std::int64_t index) const {
    const auto it = std::upper_bound(shards.begin(), shards.end(), index,
                                     [](std::int64_t i, const Shard& s) { return i < s.first; });
    return *(it - 1);
  }
};

// Note [Mapped shards]: with ShardAccess::kMap (data.io=mmap) each shard file is mapped and a
// block is a pointer to its stored chunk in the mapping, so reading a block from the page cache
// costs its checksum alone: no copy into fresh memory, which made the first pass from the files
// about a fifth of a raw read's rate (docs/benchmarks.md). The input takes no room of the cache
// budget; the ranks of a node share one copy of the split in the page cache instead of holding
// one each. A block's checksum is checked when it is first read, as a block read into memory is;
// a page the kernel drops and reads again later, or a file rewritten in place, is not checked
// again. Only chunks that are the blocks (or a whole shard smaller than a block) and are stored as
// their rows and a checksum (io's raw chunk reads), in files without a user block, can be mapped;
// any other split, or one on a file system that cannot map files, is read as ShardAccess::kRead,
// and not_mapped says why.
void Split::State::map_shards() {
  std::vector<std::vector<std::int64_t>> offsets;
  for (const Shard& shard : shards) {
    const std::string where = shard.file.path() + ": field '" + input_field.name + "'";
    if (memory_dtype(input_field.dtype) != input_field.dtype) {
      not_mapped = where + " is " + io::dtype_name(input_field.dtype) + ", widened as it is read";
      return;
    }
    // A shard smaller than a block is one chunk (chunks are clipped to the data).
    const std::int64_t rows = shard.input.raw_chunk_rows();
    if (rows != 0 && rows != block_rows && !(rows == shard.samples && rows < block_rows)) {
      not_mapped = where + " has chunks of " + std::to_string(rows) + " samples, not the " +
                   std::to_string(block_rows) + " hpctrain writes";
      return;
    }
    std::string why;
    offsets.push_back(shard.input.raw_chunk_offsets(&why));
    if (offsets.back().empty()) {
      not_mapped = where + ": " + why;
      return;
    }
  }
  std::vector<io::MappedFile> files;
  for (size_t k = 0; k < shards.size(); ++k) {
    const std::string& path = shards[k].file.path();
    try {
      files.push_back(io::MappedFile::map(path, ExitCode::kData));
    } catch (const Error& e) {
      not_mapped = e.what();  // a file system that cannot map files: read them
      return;
    }
    const std::int64_t stored = shards[k].input.raw_chunk_bytes();
    if (std::any_of(offsets[k].begin(), offsets[k].end(),
                    [&](std::int64_t at) { return at + stored > files.back().size(); })) {
      throw DataError(path + ": field '" + input_field.name + "' has chunks past the end of the file "
                      "(truncated?); restore or re-create it");
    }
  }
  for (size_t k = 0; k < shards.size(); ++k) {
    shards[k].mapped = std::move(files[k]);
    shards[k].chunk_offsets = std::move(offsets[k]);
  }
  mapped = true;
}

Split Split::load(const std::string& dataset_dir, const std::string& split_name,
                  std::int64_t cache_bytes, ShardAccess access) {
  auto state = std::make_shared<State>();
  state->manifest = Manifest::load(dataset_dir);
  const Manifest& m = state->manifest;
  const SplitSpec& spec = m.split(split_name);
  if (spec.samples() == 0) throw DataError(dataset_dir + ": split '" + split_name + "' is empty");
  if (m.fields.size() < 2) {
    throw DataError(dataset_dir + ": '" + m.name + "' is not a dataset of samples (an input and a 'label' "
                    "field); a token stream is read in windows, by model.name=gpt");
  }
  state->input_field = m.fields.front();
  const FieldSpec& label_field = m.field("label");
  if (!label_field.shape.empty()) throw DataError(dataset_dir + ": 'label' must be a scalar per sample");
  state->row_bytes = memory_row_bytes(state->input_field);
  state->block_rows = chunk_rows(state->input_field);
  for (const auto& shard : spec.shards) {
    const std::string path = (std::filesystem::path(dataset_dir) / shard.file).string();
    if (!std::filesystem::exists(path)) throw DataError(path + ": shard listed in the manifest is missing");
    io::H5File file = io::H5File::open_read(path, ExitCode::kData);
    check_shard_field(file, shard, state->input_field);
    check_shard_field(file, shard, label_field);
    // Each block is one input chunk (as hpctrain writes them), read once into the block cache: HDF5 needs no cache of its
    // own for it. A label chunk (131,072 int64, exactly 1 MiB) spans about 100 blocks and must stay
    // cached, which a cache of exactly 1 MiB does not do: every block then re-read and
    // re-checksummed it (docs/benchmarks.md). So 2 MiB per shard for labels, outside cache_mb.
    io::H5Dataset input = file.open_dataset(state->input_field.name, 0);
    io::H5Dataset label = file.open_dataset(label_field.name, std::int64_t{2} << 20);
    const std::int64_t first_block = static_cast<std::int64_t>(state->blocks.size());
    state->blocks.resize(state->blocks.size() +
                         static_cast<size_t>((shard.samples + state->block_rows - 1) / state->block_rows));
    state->shards.push_back(State::Shard{state->samples, shard.samples, first_block, std::move(file),
                                         std::move(input), std::move(label), std::nullopt, {}});
    state->samples += shard.samples;
  }
  if (access == ShardAccess::kMap) state->map_shards();
  const std::int64_t cached_row_bytes = (state->mapped ? 0 : state->row_bytes) + kLabelBytes;
  state->cached_block_bytes = state->block_rows * cached_row_bytes;
  state->whole_split = state->samples * cached_row_bytes <= cache_bytes;
  const auto block_count = static_cast<std::int64_t>(state->blocks.size());
  state->capacity = state->whole_split ? block_count
                                       : std::clamp<std::int64_t>(cache_bytes / state->cached_block_bytes, 1, block_count);
  state->recency_position.resize(state->blocks.size());
  if (state->whole_split) {
    state->resident.reset(new std::atomic<const State::Block*>[state->blocks.size()]);
    for (size_t b = 0; b < state->blocks.size(); ++b) state->resident[b].store(nullptr, std::memory_order_relaxed);
  }
  Split out;
  out.state_ = std::move(state);
  return out;
}

ShardAccess shard_access(config::DataIo data_io) {
  return data_io == config::DataIo::kMmap ? ShardAccess::kMap : ShardAccess::kRead;
}

std::int64_t Split::size() const { return state_->samples; }
std::int64_t Split::input_bytes() const { return state_->samples * row_bytes(state_->input_field); }
const Manifest& Split::manifest() const { return state_->manifest; }
std::vector<std::int64_t> Split::sample_shape() const { return state_->input_field.shape; }

namespace {

// Rows to copy: `rows` consecutive samples of one block.
struct RowRun {
  const std::uint8_t* input;
  const std::int64_t* labels;
  std::int64_t rows;
};

// The first cache lines of a run, fetched while earlier runs are copied: in a shuffled batch every
// run is a row somewhere else in memory. A longer run is streamed by the hardware prefetcher.
void prefetch(const RowRun& run, std::int64_t row_bytes) {
  constexpr std::int64_t kLine = 64;
  constexpr std::int64_t kMaxBytes = 1024;
  const std::int64_t bytes = std::min(run.rows * row_bytes, kMaxBytes);
  for (std::int64_t at = 0; at < bytes; at += kLine) __builtin_prefetch(run.input + at);
  __builtin_prefetch(run.labels);
}

}  // namespace

void Split::State::gather_rows(const std::vector<std::int64_t>& indices, std::uint8_t* input,
                               std::int64_t* target) const {
  const auto row = static_cast<size_t>(row_bytes);
  // A split held whole is copied after all its runs are found, a few runs ahead prefetched (in
  // back-to-back runs of bench data, shuffled batches from memory came faster than copying each
  // row as it is found; docs/benchmarks.md). Blocks that may be evicted are copied from at once, the
  // last few used held here, so a batch drawn from a few blocks (a shuffle by chunks) takes the
  // lock of block() once per block, not once per row.
  std::array<std::pair<std::int64_t, std::shared_ptr<const Block>>, 4> recent;
  recent.fill({-1, nullptr});
  size_t recent_next = 0;
  std::vector<RowRun> runs;
  if (whole_split) runs.reserve(indices.size());
  for (size_t k = 0; k < indices.size();) {
    const std::int64_t index = indices[k];
    check_index(index);
    const Shard& shard = shard_of(index);
    const std::int64_t local = index - shard.first;
    const std::int64_t id = shard.first_block + local / block_rows;
    const Block* b = whole_split ? resident[static_cast<size_t>(id)].load(std::memory_order_acquire) : nullptr;
    if (b == nullptr) {
      const auto memo = std::find_if(recent.begin(), recent.end(), [&](const auto& r) { return r.first == id; });
      if (memo == recent.end()) {
        recent[recent_next] = {id, block(shard, local / block_rows)};
        b = recent[recent_next].second.get();
        recent_next = (recent_next + 1) % recent.size();
      } else {
        b = memo->second.get();
      }
    }
    const std::int64_t offset = local % block_rows;
    // Consecutive indices in the same block are copied as one run (file order: whole blocks).
    std::int64_t rows = 1;
    const auto block_left = static_cast<std::int64_t>(b->labels.size()) - offset;
    while (rows < block_left && k + static_cast<size_t>(rows) < indices.size() &&
           indices[k + static_cast<size_t>(rows)] == index + rows) {
      ++rows;
    }
    const RowRun run{b->input + static_cast<size_t>(offset) * row, b->labels.data() + offset, rows};
    if (whole_split) {
      runs.push_back(run);
    } else {
      std::memcpy(input + k * row, run.input, static_cast<size_t>(rows) * row);
      std::memcpy(target + k, run.labels, static_cast<size_t>(rows) * sizeof(std::int64_t));
    }
    k += static_cast<size_t>(rows);
  }
  constexpr size_t kAhead = 4;
  for (size_t r = 0; r < std::min(kAhead, runs.size()); ++r) prefetch(runs[r], row_bytes);
  for (size_t r = 0; r < runs.size(); ++r) {
    if (r + kAhead < runs.size()) prefetch(runs[r + kAhead], row_bytes);
    const auto rows = static_cast<size_t>(runs[r].rows);
    std::memcpy(input, runs[r].input, rows * row);
    std::memcpy(target, runs[r].labels, rows * sizeof(std::int64_t));
    input += rows * row;
    target += rows;
  }
}

Batch Split::gather(const std::vector<std::int64_t>& indices, bool pinned) const {
  const State& s = *state_;
  const auto count = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> shape{count};
  shape.insert(shape.end(), s.input_field.shape.begin(), s.input_field.shape.end());
  at::Tensor raw = s.batch_memory->empty(shape, scalar_type(s.input_field.dtype), pinned);
  at::Tensor target = s.batch_memory->empty({count}, at::kLong, pinned);
  s.gather_rows(indices, static_cast<std::uint8_t*>(raw.data_ptr()), target.data_ptr<std::int64_t>());
  Batch batch;
  batch.input = raw;
  batch.target = target;
  return batch;
}

at::Tensor Split::normalize(const at::Tensor& raw) const {
  const Manifest& m = state_->manifest;
  // A copy also when `raw` is float32 already (to() would return `raw` itself): never in place.
  at::Tensor input = raw.scalar_type() == at::kFloat ? raw.clone() : raw.to(at::kFloat);
  // Integer pixels are scaled to [0, 1] first, as torchvision's ToTensor does.
  if (raw.scalar_type() == at::kByte) input.div_(255.0);
  return input.sub_(m.input_mean).div_(m.input_std);
}

bool Split::caches_blocks() const { return state_->whole_split; }

bool Split::maps_files() const { return state_->mapped; }

const std::string& Split::why_not_mapped() const { return state_->not_mapped; }

std::int64_t Split::block_cache_bytes() const { return state_->cached_block_bytes; }

std::int64_t Split::blocks_held_at_most() const { return state_->capacity; }

const BatchPool& Split::batch_memory() const { return *state_->batch_memory; }

std::int64_t Split::blocks_read() const {
  const std::lock_guard<std::mutex> lock(state_->blocks_mutex);
  return state_->blocks_read;
}

void Split::preload() const {
  const State& s = *state_;
  HT_CHECK(s.whole_split, "preload of a split that is not held in memory");
  for (const State::Shard& shard : s.shards) {
    for (std::int64_t b = 0; b * s.block_rows < shard.samples; ++b) s.block(shard, b);
  }
}

void Split::preload_collective() const {
  const State& s = *state_;
  HT_CHECK(s.whole_split && !s.mapped, "collective preload of a split that is mapped or not held in memory");
  const FieldSpec& label = s.manifest.field("label");
  for (const State::Shard& shard : s.shards) {
    const io::CollectiveFile file = io::CollectiveFile::open(shard.file.path(), ExitCode::kData);
    std::vector<std::uint8_t> input(static_cast<size_t>(shard.samples * s.row_bytes));
    std::vector<std::int64_t> labels(static_cast<size_t>(shard.samples));
    file.read_rows_everywhere(s.input_field.name, memory_dtype(s.input_field.dtype), 0, shard.samples,
                              input.data());
    file.read_rows_everywhere(label.name, io::DType::kInt64, 0, shard.samples, labels.data());
    s.check_labels(labels.data(), shard.samples);
    const std::lock_guard<std::mutex> lock(s.blocks_mutex);
    for (std::int64_t b = 0; b * s.block_rows < shard.samples; ++b) {
      const std::int64_t first = b * s.block_rows;
      const std::int64_t rows = std::min(s.block_rows, shard.samples - first);
      auto block = std::make_shared<State::Block>();
      block->owned.reset(new std::uint8_t[static_cast<size_t>(rows * s.row_bytes)]);
      block->input = block->owned.get();
      std::memcpy(block->owned.get(), input.data() + first * s.row_bytes, static_cast<size_t>(rows * s.row_bytes));
      block->labels.assign(labels.begin() + first, labels.begin() + first + rows);
      if (!s.blocks[static_cast<size_t>(shard.first_block + b)]) s.hold(shard.first_block + b, std::move(block));
    }
  }
}

Batch Split::range(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> indices(static_cast<size_t>(count));
  std::iota(indices.begin(), indices.end(), first);
  return gather(indices);
}

void set_shuffle_window(const Manifest& manifest, const std::string& split, std::int64_t window_mb,
                        SamplerOptions& options) {
  if (window_mb <= 0) return;
  // The blocks a Split reads: each shard's samples in runs of chunk_rows.
  const FieldSpec& input = manifest.fields.front();
  const std::int64_t rows = chunk_rows(input);
  options.block_starts.clear();
  std::int64_t shard_first = 0;
  for (const ShardSpec& shard : manifest.split(split).shards) {
    for (std::int64_t first = 0; first < shard.samples; first += rows) options.block_starts.push_back(shard_first + first);
    shard_first += shard.samples;
  }
  // Counted in blocks of input read into memory, so with data.cache_mb >= 2 x window_mb the cache
  // holds two windows, the one being read and the next (mapped, blocks take less room).
  options.window_blocks = std::max<std::int64_t>(1, (window_mb << 20) / block_bytes(input));
}

void check_shuffle_window(const Split& split, const SamplerOptions& options) {
  if (options.block_starts.empty() || split.caches_blocks()) return;
  if (split.blocks_held_at_most() >= 2 * options.window_blocks) return;
  const std::int64_t bytes = split.block_cache_bytes();
  const std::int64_t needed_mb = (2 * options.window_blocks * bytes + (1 << 20) - 1) >> 20;
  throw ConfigError("a shuffle by chunks reads windows of " + std::to_string(options.window_blocks) +
                    " block(s) and holds two at once, but data.cache_mb holds " +
                    std::to_string(split.blocks_held_at_most()) + " block(s) of this split (" +
                    std::to_string(bytes) + " bytes each); raise data.cache_mb to at least " +
                    std::to_string(needed_mb));
}

}  // namespace hpctrain::data
