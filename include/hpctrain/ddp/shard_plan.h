// Which part of every gradient bucket a rank owns when the optimizer is sharded (ZeRO,
// docs/distributed.md "Sharding (ZeRO)"): a bucket is padded to a multiple of the world size and
// cut into that many equal, contiguous chunks, rank r owning chunk r; a parameter that straddles
// chunks is split between ranks, so any parameter count, any size and any world size work. A pure
// function of the bucket plan, the sizes and (world, rank): every rank derives every rank's plan.
// Depends on bucket_plan.h only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hpctrain/ddp/bucket_plan.h"

namespace hpctrain::ddp {

// The elements [parameter_offset, parameter_offset + numel) of a parameter, flattened, that a rank
// owns: at [shard_offset, shard_offset + numel) of its chunk of bucket `bucket`.
struct ShardPiece {
  std::size_t parameter = 0;
  std::size_t bucket = 0;
  std::int64_t parameter_offset = 0;
  std::int64_t shard_offset = 0;
  std::int64_t numel = 0;
};

// A bucket's size padded to a multiple of `world`: what its reduce-scatter and all-gather carry.
std::int64_t padded_numel(std::int64_t numel, int world);

// Rank `rank`'s pieces, bucket by bucket, in each bucket's order of parameters. `numels`: every
// parameter's element count, indexed as the buckets index them.
std::vector<ShardPiece> plan_shard(const std::vector<Bucket>& buckets, const std::vector<std::int64_t>& numels,
                                   int world, int rank);

}  // namespace hpctrain::ddp
