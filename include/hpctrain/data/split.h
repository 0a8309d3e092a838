// One split of a dataset (e.g. "train"), read on demand from its HDF5 shards in blocks of
// consecutive samples, one HDF5 chunk each, held up to data.cache_mb (Note [Block cache] in
// split.cpp): a split that fits is read once and held whole; a larger one keeps the most recently
// used blocks, which serves file order and a shuffle by blocks (data.shuffle_window_mb) with each
// block read once per epoch. A block's input is used in place in the mapped shard file
// (data.io=mmap, Note [Mapped shards]), taking no room in the budget, or read into memory.
// gather() may be called from several threads at once (the loader's): io serializes HDF5 calls
// (io/h5_file.h); checksums and copies run in parallel.
// Depends on core, io, data/manifest, data/batch_pool, ATen.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/config/config.h"
#include "hpctrain/data/distributed_sampler.h"
#include "hpctrain/data/manifest.h"

namespace hpctrain::data {

class BatchPool;

struct Batch {
  at::Tensor input;   // [B, ...sample shape] as stored (uint8 pixels stay uint8); see normalize()
  at::Tensor target;  // int64 [B] class labels; int64 [B, T] next tokens for a token stream
  // A training micro-batch's (Source::read): float32 [B], 1 for a real sample, 0 for padding;
  // its real samples on this rank and over all ranks.
  at::Tensor weight;
  // A sample split's: int64 [B] on the host, each sample's key for draws after reading
  // (data/sample_keys.h).
  at::Tensor keys;
  std::int64_t real = 0;
  std::int64_t global_real = 0;
};

// How a Split reads its shards' input field (data.io; Note [Mapped shards] in split.cpp).
enum class ShardAccess {
  kRead,  // through HDF5 into blocks of the process's memory
  kMap,   // the shard files mapped: blocks are the page cache's bytes, one copy per node
};

// data.io's value as a Split reads: mmap maps, posix and mpio read.
ShardAccess shard_access(config::DataIo data_io);

class Split {
 public:
  // Opens the split's shards and checks them against the manifest (the first field is the input,
  // the field named "label" the target). Throws DataError on anything missing or malformed.
  // kMap reads a split whose input chunks are stored as hpctrain writes them (uncompressed,
  // checksummed, in the type it is trained in) from the mapped files; any other is read as kRead.
  static Split load(const std::string& dataset_dir, const std::string& split_name,
                    std::int64_t cache_bytes = std::int64_t{256} << 20,
                    ShardAccess access = ShardAccess::kMap);

  std::int64_t size() const;
  // The bytes of the split's input field as stored.
  std::int64_t input_bytes() const;
  const Manifest& manifest() const;
  std::vector<std::int64_t> sample_shape() const;

  // The samples at `indices` (each in [0, size())), in that order; repeats are allowed. `pinned`:
  // the tensors are allocated in page-locked memory, so a copy to a GPU can be asynchronous
  // (needs a CUDA build of libtorch; the trainer asks for it when it trains on a GPU).
  Batch gather(const std::vector<std::int64_t>& indices, bool pinned = false) const;
  // Samples [first, first + count).
  Batch range(std::int64_t first, std::int64_t count) const;

  // A batch's input as the model takes it: float32, integer pixels scaled to [0, 1], then the
  // manifest's mean and std applied. Runs where `raw` is, so on a GPU the copy is of the
  // stored bytes (4x fewer for uint8) and the arithmetic is the GPU's.
  at::Tensor normalize(const at::Tensor& raw) const;

  // True when the whole split fits in the cache budget and is held in memory in blocks once read.
  bool caches_blocks() const;
  // True when the input is read from the mapped shard files (ShardAccess::kMap took effect); the
  // cache budget then holds the labels alone.
  bool maps_files() const;
  // Why a split loaded with ShardAccess::kMap is read instead (empty when mapped, or not asked).
  const std::string& why_not_mapped() const;
  // The cache memory one block takes: its input in memory dtype (unless mapped) and its labels.
  std::int64_t block_cache_bytes() const;
  // Blocks the cache holds at most (all of them when caches_blocks()).
  std::int64_t blocks_held_at_most() const;
  // Blocks read from the files so far, re-reads of evicted blocks included.
  std::int64_t blocks_read() const;
  // Where gather() takes its batches' memory (Note [Batch memory] in batch_pool.cpp).
  const BatchPool& batch_memory() const;

  // For a split held in memory (caches_blocks()): reads every block not read yet, now.
  // preload() reads on this rank alone (POSIX I/O through HDF5). preload_collective() is
  // collective over MPI_COMM_WORLD (data.io=mpio): each shard is read once by all ranks together
  // through MPI-IO, each rank reading 1/W of it, and shared (io/collective_file.h).
  void preload() const;
  void preload_collective() const;

 private:
  struct State;
  std::shared_ptr<const State> state_;  // shared: a Split is cheap to copy
};

// data.shuffle_window_mb as the sampler takes it for `split`: the blocks a Split reads (one input
// chunk of one shard each), window_mb MiB of them, at least one, shuffled together. window_mb 0
// keeps the global shuffle.
void set_shuffle_window(const Manifest& manifest, const std::string& split, std::int64_t window_mb,
                        SamplerOptions& options);

// Throws ConfigError when `split` is larger than its cache and the cache cannot hold the two
// windows of blocks a shuffle by chunks (`options` from set_shuffle_window) reads at once.
void check_shuffle_window(const Split& split, const SamplerOptions& options);

}  // namespace hpctrain::data
