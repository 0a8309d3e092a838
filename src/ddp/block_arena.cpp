#include "hpctrain/ddp/block_arena.h"

#include <iterator>
#include <stdexcept>

namespace hpctrain::ddp {

std::optional<std::size_t> BlockArena::take(std::size_t bytes) {
  std::size_t offset = 0;
  const auto fit = free_by_size_.lower_bound({bytes, 0});
  if (fit != free_by_size_.end()) {
    offset = fit->second;
    const std::size_t range = fit->first;
    remove_free(free_.find(offset));
    if (range > bytes) add_free(offset + bytes, range - bytes);
  } else {
    if (bytes > capacity_ - top_) return std::nullopt;
    offset = top_;
    top_ += bytes;
  }
  used_.emplace(offset, bytes);
  used_bytes_ += bytes;
  return offset;
}

std::size_t BlockArena::bytes_at(std::size_t offset) const {
  const auto found = used_.find(offset);
  if (found == used_.end()) throw std::logic_error("BlockArena: no block in use at this offset");
  return found->second;
}

std::size_t BlockArena::give_back(std::size_t offset) {
  const std::size_t bytes = bytes_at(offset);
  used_.erase(offset);
  used_bytes_ -= bytes;
  std::size_t start = offset;
  std::size_t end = offset + bytes;
  const auto next = free_.find(end);
  if (next != free_.end()) {
    end += next->second;
    remove_free(next);
  }
  const auto after = free_.lower_bound(start);
  if (after != free_.begin()) {
    const auto before = std::prev(after);
    if (before->first + before->second == start) {
      start = before->first;
      remove_free(before);
    }
  }
  if (end == top_) {
    top_ = start;  // the free range at the top is given back to it
  } else {
    add_free(start, end - start);
  }
  return bytes;
}

void BlockArena::add_free(std::size_t offset, std::size_t bytes) {
  free_.emplace(offset, bytes);
  free_by_size_.emplace(bytes, offset);
}

void BlockArena::remove_free(std::map<std::size_t, std::size_t>::iterator range) {
  free_by_size_.erase({range->second, range->first});
  free_.erase(range);
}

}  // namespace hpctrain::ddp
