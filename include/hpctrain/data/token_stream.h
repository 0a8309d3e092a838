// A token-stream split read as windows of consecutive tokens, for language models. A token stream
// is a split whose manifest has one scalar integer field (`tokens: uint16[]`, as `prepare text`
// writes it); its shards, back to back, are the stream, so a window may span two shards. The
// window at offset o holds tokens [o, o + block_size]: the input is its first block_size tokens,
// the target the last block_size (the next token at each place). A stream that fits the cache
// budget is read whole when loaded; a larger one is read per window through HDF5's chunk cache.
// gather() may be called from several threads at once (io serializes HDF5 calls).
// Depends on core, io, data/manifest, data/split (Batch), data/batch_pool, ATen.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hpctrain/data/manifest.h"
#include "hpctrain/data/split.h"

namespace hpctrain::data {

// True when the split's schema is a token stream (one scalar integer field).
bool is_token_stream(const Manifest& manifest);

class TokenStream {
 public:
  // Throws DataError for a missing or malformed shard, or a split that is not a token stream.
  static TokenStream load(const std::string& dataset_dir, const std::string& split_name,
                          std::int64_t block_size, std::int64_t cache_bytes = std::int64_t{256} << 20);

  std::int64_t size() const;  // tokens
  std::int64_t block_size() const;
  const Manifest& manifest() const;
  bool in_memory() const;
  // The memory HDF5's chunk caches take once filled: data.cache_mb's budget for a stream read
  // per window, 0 for one held whole (already in memory).
  std::int64_t chunk_cache_bytes() const;

  // The windows at `offsets` (each in [0, size() - block_size - 1]): input and target, both
  // int64 [B, block_size]. `pinned`: page-locked tensors, as Split::gather.
  Batch gather(const std::vector<std::int64_t>& offsets, bool pinned = false) const;
  // Where gather() takes its batches' memory (Note [Batch memory] in batch_pool.cpp).
  const BatchPool& batch_memory() const;

 private:
  struct State;
  std::shared_ptr<const State> state_;
};

}  // namespace hpctrain::data
