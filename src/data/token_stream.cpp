#include "hpctrain/data/token_stream.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>

#include "hpctrain/data/batch_pool.h"
#include "hpctrain/data/dataset_check.h"

namespace hpctrain::data {

bool is_token_stream(const Manifest& manifest) {
  if (manifest.fields.size() != 1 || !manifest.fields.front().shape.empty()) return false;
  const io::DType dtype = manifest.fields.front().dtype;
  return dtype == io::DType::kUInt8 || dtype == io::DType::kUInt16 || dtype == io::DType::kUInt32 ||
         dtype == io::DType::kInt32 || dtype == io::DType::kInt64;
}

struct TokenStream::State {
  struct Shard {
    std::int64_t first = 0;  // its first token's place in the stream
    std::int64_t tokens = 0;
    io::H5File file;
    io::H5Dataset dataset;
  };
  Manifest manifest;
  std::vector<Shard> shards;
  std::int64_t tokens = 0;
  std::int64_t block_size = 1;
  std::vector<std::int32_t> memory;  // the whole stream, when it fits the budget
  std::int64_t chunk_cache_bytes = 0;  // otherwise the budget, HDF5's chunk caches filled as it reads
  std::shared_ptr<BatchPool> batch_memory = BatchPool::make();  // gather's tensors (Note [Batch memory])

  // A token outside the vocabulary (manifest num_classes) would index past the model's embedding,
  // on one rank only; it is an error in the data, named here.
  void check_tokens(const std::int32_t* tokens, std::int64_t count, std::int64_t first) const {
    if (manifest.num_classes <= 0) return;
    for (std::int64_t i = 0; i < count; ++i) {
      if (tokens[i] < 0 || tokens[i] >= manifest.num_classes) {
        throw DataError("token stream '" + manifest.name + "' holds token " + std::to_string(tokens[i]) + " at " +
                        std::to_string(first + i) + ", outside its vocabulary [0, " +
                        std::to_string(manifest.num_classes) + ") (manifest num_classes)");
      }
    }
  }

  // Tokens [first, first + count) of the stream into `out`, shard by shard.
  void read(std::int64_t first, std::int64_t count, std::int32_t* out) const {
    auto shard = std::upper_bound(shards.begin(), shards.end(), first,
                                  [](std::int64_t i, const Shard& s) { return i < s.first; }) - 1;
    for (; count > 0; ++shard) {
      const std::int64_t local = first - shard->first;
      const std::int64_t n = std::min(count, shard->tokens - local);
      shard->dataset.read_rows(io::DType::kInt32, local, n, out);
      first += n;
      count -= n;
      out += n;
    }
  }
};

TokenStream TokenStream::load(const std::string& dataset_dir, const std::string& split_name,
                              std::int64_t block_size, std::int64_t cache_bytes) {
  auto state = std::make_shared<State>();
  state->manifest = Manifest::load(dataset_dir);
  state->block_size = block_size;
  const Manifest& m = state->manifest;
  if (!is_token_stream(m)) {
    throw DataError(dataset_dir + ": '" + m.name + "' is not a token stream (one scalar integer field "
                    "per sample, as `hpctrain prepare text` writes); its first field is '" +
                    m.fields.front().name + "' " + io::dtype_name(m.fields.front().dtype) +
                    io::shape_text(m.fields.front().shape));
  }
  const FieldSpec& field = m.fields.front();
  const SplitSpec& spec = m.split(split_name);
  if (spec.samples() == 0) throw DataError(dataset_dir + ": split '" + split_name + "' is empty");
  const bool in_memory = spec.samples() * std::int64_t{4} <= cache_bytes;
  for (const auto& shard : spec.shards) {
    const std::string path = (std::filesystem::path(dataset_dir) / shard.file).string();
    if (!std::filesystem::exists(path)) throw DataError(path + ": shard listed in the manifest is missing");
    io::H5File file = io::H5File::open_read(path, ExitCode::kData);
    check_shard_field(file, shard, field);
    const std::int64_t share = in_memory ? std::int64_t{4} << 20
                                         : cache_bytes * shard.samples / spec.samples();
    io::H5Dataset dataset = file.open_dataset(field.name, share);
    state->shards.push_back({state->tokens, shard.samples, std::move(file), std::move(dataset)});
    state->tokens += shard.samples;
  }
  state->chunk_cache_bytes = in_memory ? 0 : cache_bytes;
  if (in_memory) {
    state->memory.resize(static_cast<size_t>(state->tokens));
    state->read(0, state->tokens, state->memory.data());
    state->check_tokens(state->memory.data(), state->tokens, 0);
  }
  TokenStream out;
  out.state_ = std::move(state);
  return out;
}

std::int64_t TokenStream::size() const { return state_->tokens; }
std::int64_t TokenStream::block_size() const { return state_->block_size; }
std::int64_t TokenStream::chunk_cache_bytes() const { return state_->chunk_cache_bytes; }
const Manifest& TokenStream::manifest() const { return state_->manifest; }
bool TokenStream::in_memory() const { return !state_->memory.empty(); }

const BatchPool& TokenStream::batch_memory() const { return *state_->batch_memory; }

Batch TokenStream::gather(const std::vector<std::int64_t>& offsets, bool pinned) const {
  const State& s = *state_;
  const std::int64_t window = s.block_size + 1;
  const auto count = static_cast<std::int64_t>(offsets.size());
  // Two tensors, not two views of one: a pinned tensor copies to a GPU asynchronously only
  // when it is contiguous.
  at::Tensor input = s.batch_memory->empty({count, s.block_size}, at::kLong, pinned);
  at::Tensor target = s.batch_memory->empty({count, s.block_size}, at::kLong, pinned);
  auto* to_input = input.data_ptr<std::int64_t>();
  auto* to_target = target.data_ptr<std::int64_t>();
  std::vector<std::int32_t> tokens(static_cast<size_t>(window));
  for (const std::int64_t offset : offsets) {
    if (offset < 0 || offset + window > s.tokens) {
      throw DataError("window offset " + std::to_string(offset) + " is outside the stream of " +
                      std::to_string(s.tokens) + " tokens (block_size " + std::to_string(s.block_size) + ")");
    }
    const std::int32_t* from = tokens.data();
    if (s.memory.empty()) {
      s.read(offset, window, tokens.data());
      s.check_tokens(tokens.data(), window, offset);
    } else {
      from = s.memory.data() + offset;  // only here: an offset added to an empty vector's null data() is undefined
    }
    to_input = std::copy(from, from + s.block_size, to_input);
    to_target = std::copy(from + 1, from + window, to_target);
  }
  Batch batch;
  batch.input = input;
  batch.target = target;
  return batch;
}

}  // namespace hpctrain::data
