#include "hpctrain/ddp/shard_plan.h"

#include <algorithm>

#include "hpctrain/core/error.h"

namespace hpctrain::ddp {

std::int64_t padded_numel(std::int64_t numel, int world) {
  HT_CHECK(world > 0 && numel >= 0, "a bucket's size and the world size");
  return (numel + world - 1) / world * world;
}

std::vector<ShardPiece> plan_shard(const std::vector<Bucket>& buckets, const std::vector<std::int64_t>& numels,
                                   int world, int rank) {
  HT_CHECK(rank >= 0 && rank < world, "rank within the world");
  std::vector<ShardPiece> pieces;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    const std::int64_t chunk = padded_numel(buckets[b].numel, world) / world;
    const std::int64_t first = chunk * rank;
    const std::int64_t end = first + chunk;
    std::int64_t offset = 0;  // of the parameter in the bucket
    for (const std::size_t p : buckets[b].parameters) {
      const std::int64_t lo = std::max(offset, first);
      const std::int64_t hi = std::min(offset + numels[p], end);
      if (lo < hi) pieces.push_back({p, b, lo - offset, lo - first, hi - lo});
      offset += numels[p];
    }
  }
  return pieces;
}

}  // namespace hpctrain::ddp
