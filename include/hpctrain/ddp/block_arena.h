// Where the block cache (block_cache.h) places its blocks in the range it reserved: best fit among
// the free ranges, a free range's unused rest kept free, neighbours merged when freed, and the
// top of the range raised only when nothing free fits. Bookkeeping only: it never touches memory.
// Not thread-safe. Depends on nothing.
#pragma once

#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace hpctrain::ddp {

class BlockArena {
 public:
  explicit BlockArena(std::size_t capacity) : capacity_(capacity) {}

  // The offset of `bytes` (> 0) now in use; nullopt when no free range fits and the top would
  // pass the capacity.
  std::optional<std::size_t> take(std::size_t bytes);
  // Frees the block take() placed at `offset`; returns its size. Throws std::logic_error for an
  // offset that is not in use.
  std::size_t give_back(std::size_t offset);

  // The size of the block in use at `offset`. Throws std::logic_error for an offset not in use.
  std::size_t bytes_at(std::size_t offset) const;

  // The end of the highest block in use: every offset from here up is free.
  std::size_t top() const { return top_; }
  // Bytes in use, and bytes free below top().
  std::size_t used_bytes() const { return used_bytes_; }
  std::size_t free_bytes() const { return top_ - used_bytes_; }
  // The free ranges below top(), offset -> bytes.
  const std::map<std::size_t, std::size_t>& free_ranges() const { return free_; }

 private:
  void add_free(std::size_t offset, std::size_t bytes);
  void remove_free(std::map<std::size_t, std::size_t>::iterator range);

  std::size_t capacity_;
  std::size_t top_ = 0;
  std::size_t used_bytes_ = 0;
  std::map<std::size_t, std::size_t> free_;                        // offset -> bytes, below top_
  std::set<std::pair<std::size_t, std::size_t>> free_by_size_;     // (bytes, offset)
  std::unordered_map<std::size_t, std::size_t> used_;              // offset -> bytes
};

}  // namespace hpctrain::ddp
